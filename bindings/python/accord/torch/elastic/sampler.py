"""``horovod.torch.elastic.sampler``'s name for the elastic sampler, for scripts that
import it from there."""

from accord.elastic import ElasticSampler  # noqa: F401
