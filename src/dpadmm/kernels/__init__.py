"""Pure array math: per-sample losses, regularisers and their prox, scalar solvers, linear algebra.

Nothing here validates input, draws randomness, or knows about parties: callers at the
boundary (estimators, loaders) validate; algorithms compose these kernels.
"""

from .losses import LOSSES, HuberLoss, LogisticLoss, Loss, PoissonLoss, SquaredLoss, get_loss
from .regularizers import REGULARIZERS, L1, L2, ElasticNet, Regularizer, get_regularizer
from .linalg import SpectralSolver
from .scalar_prox import newton_prox

__all__ = [
    "LOSSES", "Loss", "LogisticLoss", "SquaredLoss", "HuberLoss", "PoissonLoss", "get_loss",
    "REGULARIZERS", "Regularizer", "L1", "L2", "ElasticNet", "get_regularizer",
    "SpectralSolver", "newton_prox",
]
