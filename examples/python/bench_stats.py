"""Mean and 95% confidence interval of a handful of timings, without SciPy.

The benchmarks here take 5 to 20 samples, where the normal quantile 1.96 understates
the interval by up to a factor of 6 (2 samples): the half-width is Student's t
quantile times the standard error, t from a table up to 30 degrees of freedom and
from the Cornish-Fisher expansion above, where it is within 0.001 of the exact value.
"""
import math

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(dof):
    """Two-sided 95% quantile of Student's t with `dof` degrees of freedom."""
    if dof < 1:
        raise ValueError(f"t quantile needs at least 1 degree of freedom, got {dof}")
    if dof <= len(_T975):
        return _T975[dof - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)


def mean_ci(samples):
    """(mean, half-width of its 95% confidence interval); the half-width is NaN for
    fewer than 2 samples, where no interval can be estimated."""
    values = [float(v) for v in samples]
    if not values:
        raise ValueError("mean_ci of no samples")
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, float("nan")
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, t975(n - 1) * math.sqrt(var / n)


def format_ci(samples, scale=1.0, digits=1):
    """'12.3 +- 0.4': the mean of `samples` times `scale` and its 95% interval."""
    mean, half = mean_ci(samples)
    return f"{mean * scale:.{digits}f} +- {half * scale:.{digits}f}"
