"""Moved to :mod:`dpadmm.algorithms.consensus.baseline`; kept for compatibility (old imports and pickled names)."""

# moved to dpadmm.algorithms.consensus.baseline; kept for compatibility
from .consensus.baseline import (  # noqa: F401
    _check_compare, assembler_step, AssemblerConfig, AssemblerState, compare_sensitivity, init_assembler,
    loss_difference, MARGIN, MARGIN_CLIP, node_step, NodeConfig, P_MIN, PureDPRelease, RECORD_REPLACE, Release,
    Request, setup_node, threshold,
)
from .consensus.baseline import is_private as _is_private  # noqa: F401
from .consensus.protocol import BASELINE_PROTOCOL as PROTOCOL  # noqa: F401
