"""Moved to :mod:`dpadmm.algorithms.consensus`; kept for compatibility (old imports and pickled names)."""

# moved to dpadmm.algorithms.consensus; kept for compatibility
from .consensus.schedules import (  # noqa: F401
    alpha_for_budget, check_convergence_condition, check_privacy_condition, ConvergenceConditionWarning,
    InvalidParameterError, LOGISTIC_C1, PERTURBATIONS, PrivacyPreconditionError, schedule_table,
    zhang_epsilon_terms,
)
from .consensus.solver import (  # noqa: F401
    _margins, _objective, _pad, _rotated_grad, CHUNK_BYTES, Curvature, curvature_factor, local_newton,
    local_solve, MARGIN_CLIP, rotated_data, solve_centralised,
)
from .consensus.messages import (  # noqa: F401
    BlockConfig, BlockState, ModelMessage, NeighbourMessage, RouterConfig, RouterState,
)
from .consensus.node import (  # noqa: F401
    _noise, block_coefs, block_diagnostics, block_step, describe_node_data, load_node_data, make_block,
    peer_broadcast, peer_inbox, PureDPRelease, RECORD_REPLACE, setup_block,
)
from .consensus.router import (  # noqa: F401
    init_router, router_metrics, router_step,
)
from .consensus.protocol import (  # noqa: F401
    PROTOCOL,
)
from .consensus.node import is_private as _is_private  # noqa: F401
