"""Noise mechanisms, privacy events, accountants and the ledger that composes them.

Algorithms only *record* what they released (``events``); the engine's ``PrivacyLedger``
composes the events with an accountant. Every number reported states its neighbouring relation.
"""

from .events import GaussianRelease, PureDPRelease, Relation, FEATURE_COLUMN, RECORD_REPLACE
from .ledger import PrivacyLedger, PrivacyReport
from . import accountants, mechanisms

__all__ = [
    "GaussianRelease", "PureDPRelease", "Relation", "FEATURE_COLUMN", "RECORD_REPLACE",
    "PrivacyLedger", "PrivacyReport", "accountants", "mechanisms",
]
