"""Moved to :mod:`dpadmm.algorithms.vertical`; kept for compatibility (old imports and pickled names)."""

# moved to dpadmm.algorithms.vertical; kept for compatibility
from .vertical.messages import (  # noqa: F401
    Bounds, CoordinatorConfig, CoordinatorMessage, CoordinatorState, FEATURE_COLUMN, label_sensitivity, Loss,
    MECHANISMS, PartyConfig, PartyMessage, PartyState, PrivacySpec, RECORD_REPLACE, Regularizer, RELATIONS,
    XStepSolver,
)
from .vertical.party import (  # noqa: F401
    _solve_x, as_operator, CGSolver, clip_rows, clip_share_input, eval_score, GaussianRelease, hu_sensitivity,
    isotropic_gaussian, make_party, make_solver, partial_score, party_coef, party_diagnostics, party_rank,
    party_step, range_gaussian, release, ridge_share_sensitivity, safe_norm, sensitivity, setup_party,
    soft_threshold,
)
from .vertical.coordinator import (  # noqa: F401
    _project, _z_step, coordinator_metrics, coordinator_step, init_coordinator,
)
from .vertical.data import (  # noqa: F401
    _local, describe_party_data, load_party_data,
)
from .vertical.label import label_private_step, refit_label_block  # noqa: F401
from .vertical.messages import LabelPrivacy  # noqa: F401
from .vertical.party import is_private as _is_private  # noqa: F401
from .vertical.protocol import (  # noqa: F401
    PROTOCOL,
)
