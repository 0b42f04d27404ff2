"""Old path of the message codec, which now lives in :mod:`dpadmm.runtime.codec` (the party runtime encodes its
checkpoints and audit summaries with it; the gRPC backend its wire messages).

Kept so that ``from dpadmm.backends import grpc_codec`` keeps working: this name is the same module object.
"""

import sys

from ..runtime import codec as _codec

sys.modules[__name__] = _codec
