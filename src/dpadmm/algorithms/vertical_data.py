"""Moved to :mod:`dpadmm.algorithms.vertical.data`; kept for compatibility (old imports and pickled names)."""

# moved to dpadmm.algorithms.vertical.data; kept for compatibility
from .vertical.data import (  # noqa: F401
    _local, describe_party_data, load_party_data, PREPARATIONS,
)
from ..data.prepare import (  # noqa: F401
    clip_rows, column_scaling, default_row_clip, prepare_block,
)
