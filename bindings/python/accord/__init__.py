"""Accord: collective communication for data-parallel deep learning.

``accord.torch`` is Horovod's PyTorch API on Accord (``import accord.torch as hvd``);
``accord.numpy`` runs the same collectives on NumPy arrays. Both share one runtime per
process, started by either one's ``init()``.
"""

__version__ = "0.1.0"
