"""Moved to :mod:`dpadmm.algorithms.experts.party`; kept for compatibility (old imports and pickled names)."""

# moved to dpadmm.algorithms.experts.party; kept for compatibility
from .experts.messages import (  # noqa: F401
    ExpertConfig, ExpertState, FitRequest, Rows,
)
from .experts.party import (  # noqa: F401
    _block, _flip_probability, _ids, _own_protocol, _same_file, _shared, describe, fit_step, is_private, load,
    logit, model, setup_party,
)
