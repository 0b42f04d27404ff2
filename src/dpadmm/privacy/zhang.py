"""Moved to :mod:`dpadmm.algorithms.consensus.report`; kept for compatibility (old imports and pickled names)."""

# moved to dpadmm.algorithms.consensus.report; kept for compatibility
from ..algorithms.consensus.report import (  # noqa: F401
    PrivacyLedger, PrivacyReport, PureDPRelease, RECORD_REPLACE, zhang_privacy_curve, zhang_report,
)
