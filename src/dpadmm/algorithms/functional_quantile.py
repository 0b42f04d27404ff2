"""Moved to :mod:`dpadmm.algorithms.functional`; kept for compatibility (old imports and pickled names)."""

# moved to dpadmm.algorithms.functional; kept for compatibility
from .functional.rules import (  # noqa: F401
    bandwidth, FULL_LEVELS, LOCAL_STEPS, METHODS, NEWTON_ITERATIONS, PENALTIES, penalty_subgradient,
    penalty_value, smooth_schedule, STEP_RULES, step_size, WARM_LEVELS,
)
from .functional.messages import (  # noqa: F401
    HubConfig, HubMessage, HubState, PartyConfig, PartyMessage, PartyState, Settings,
)
from .functional.local import (  # noqa: F401
    _At, _bmm, _linearized, _residuals, _smoothed_objective, _weighted_gram, check_loss, exact_local_solve,
    mean_check_loss, sensitivity, sensitivity_premises, smoothed_check_curvature, smoothed_check_grad,
    smoothed_check_loss,
)
from .functional.party import (  # noqa: F401
    _refuse_round, GaussianRelease, make_party, party_coef, party_diagnostics, party_step, RECORD_REPLACE,
    setup_party, setup_party_from_curves,
)
from .functional.hub import (  # noqa: F401
    hub_metrics, hub_step, init_hub,
)
from .functional.protocol import (  # noqa: F401
    PROTOCOL,
)
from .functional.party import is_private as _is_private  # noqa: F401
