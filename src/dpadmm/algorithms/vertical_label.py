"""Moved to :mod:`dpadmm.algorithms.vertical.label`; kept for compatibility (old imports and pickled names)."""

# moved to dpadmm.algorithms.vertical.label; kept for compatibility
from .vertical.label import (  # noqa: F401
    flip_probability, FOLDS, GaussianRelease, LABEL_CHANGE,
    label_private_step, MARGIN, PureDPRelease, randomized_response, refit_label_block,
)
from .vertical.messages import (  # noqa: F401
    LabelPrivacy,
)
