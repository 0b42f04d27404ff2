"""Moved to :mod:`dpadmm.algorithms.vertical.sgd`; kept for compatibility (old imports and pickled names)."""

# moved to dpadmm.algorithms.vertical.sgd; kept for compatibility
from .vertical.sgd import (  # noqa: F401
    _batch, hub_metrics, hub_step, init_hub, Loss, party_diagnostics, party_step, rounds_per_epoch, setup_party,
    SGDHubConfig, SGDHubState, SGDInbox, SGDOutbox, SGDPartyConfig, SGDPartyState,
)
