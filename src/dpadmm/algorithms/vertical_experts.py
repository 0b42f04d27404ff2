"""Moved to :mod:`dpadmm.algorithms.experts.model`; kept for compatibility (old imports and pickled names)."""

# moved to dpadmm.algorithms.experts.model; kept for compatibility
from .experts.model import (  # noqa: F401
    _solve, augment, clip_rows, combine, expert_lambda, expert_logit, fit_expert, gaussian, GaussianRelease,
    get_loss, GRADIENT_TOLERANCE, LAMBDA_FLOOR, public_range_ok, R_RANGE, RECORD_REPLACE, sensitivity,
)
from .experts.protocol import (  # noqa: F401
    PROTOCOL,
)
