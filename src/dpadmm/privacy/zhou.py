"""Moved to :mod:`dpadmm.algorithms.functional.report`; kept for compatibility (old imports and pickled names)."""

# moved to dpadmm.algorithms.functional.report; kept for compatibility
from ..algorithms.functional.report import (  # noqa: F401
    _merge_rounding, advanced_composition, calibrate_noise_multiplier, calibrate_total, gaussian_epsilon,
    GaussianRelease, iteration_noise_multiplier, paper_bound, PrivacyLedger, PrivacyReport, RECORD_REPLACE,
    total_epsilon, zhou_report, zhou_sensitivity, zhou_sigma,
)
