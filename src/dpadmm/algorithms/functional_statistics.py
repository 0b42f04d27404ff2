"""Moved to :mod:`dpadmm.algorithms.functional.statistics`; kept for compatibility (old imports and pickled names)."""

# moved to dpadmm.algorithms.functional.statistics; kept for compatibility
from .functional.statistics import (  # noqa: F401
    _check_request, _hist, _refuse_unnoised, compare_sensitivity, F, GaussianRelease, model_predict,
    moment_release_sensitivity, ONE_SHOT_STAGES, pinball_difference, QUANTILE_STEPS, RECORD_REPLACE,
    setup_stats, stats_step, StatsConfig, StatsMessage, StatsRequest, THRESHOLD, X_EDGES, X_QUANTILE, Y_EDGES,
    Y_QUANTILES,
)
from .functional.statistics_hub import (  # noqa: F401
    _first_request, _occupied, _quantile_edges, init_stats_hub, mean_and_spread, one_shot_releases,
    ranges_from_histograms, stats_hub_step, stats_rounds, StatsHubConfig, StatsHubState,
)
from .functional.data import (  # noqa: F401
    describe_curve_data, load_curve_data,
)
from .functional.protocol import STATISTICS_PROTOCOL as PROTOCOL  # noqa: F401
from .functional.statistics import is_private as _is_private  # noqa: F401
