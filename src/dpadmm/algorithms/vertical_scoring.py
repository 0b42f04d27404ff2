"""Moved to :mod:`dpadmm.algorithms.vertical.scoring`; kept for compatibility (old imports and pickled names)."""

# moved to dpadmm.algorithms.vertical.scoring; kept for compatibility
from .vertical.scoring import (  # noqa: F401
    combine, describe, InvalidDataError, load, PartyModel, ProtocolError, score, ScoringConfig, setup_party,
)
from .vertical.protocol import SCORING_PROTOCOL as PROTOCOL  # noqa: F401
from .vertical.scoring import is_private as _private, no_step as _no_step  # noqa: F401
