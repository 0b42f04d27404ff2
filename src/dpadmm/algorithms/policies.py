"""Moved: each algorithm folder's ``policy.py`` holds its protocol's hooks; kept for compatibility."""

# moved to algorithms/<folder>/policy.py; kept for compatibility
from ..privacy.policy import finite_positive as _finite_positive, not_private as _not_private  # noqa: F401
from .consensus.policy import CONSENSUS  # noqa: F401
from .experts.policy import EXPERTS, TRAIN_KEY, _experts_training_rows  # noqa: F401
from .functional.policy import FUNCTIONAL, SCALE_RANGE, STATISTICS, _stats_price  # noqa: F401
from .vertical.policy import VERTICAL  # noqa: F401
