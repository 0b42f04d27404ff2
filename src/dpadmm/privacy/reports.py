"""Moved to :mod:`dpadmm.algorithms.vertical.report`; kept for compatibility (old imports and pickled names)."""

# moved to dpadmm.algorithms.vertical.report; kept for compatibility
from ..algorithms.vertical.report import (  # noqa: F401
    _cached_epsilon, _label_block, _rr_block, classical_gaussian_epsilon, FEATURE_COLUMN, FEATURE_THREAT,
    flip_probability, gaussian_epsilon, GaussianRelease, hu_corollary1, hu_report, LABEL_CHANGE, LABEL_THREAT,
    LABELS_READABLE, PAPER_NOT_DP, PrivacyLedger, PrivacyReport, PureDPRelease, RECORD_REPLACE,
)
