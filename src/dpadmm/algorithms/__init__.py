"""One folder per algorithm: typed messages and setups, pure per-party steps, policy hooks, a report, and on
top a ``protocol.py`` that declares the party's protocol and registers it (:func:`dpadmm.protocol.register`).

Importing this package imports every folder's ``protocol.py`` below — the list of the protocols a party can
serve — so the registry is filled by these imports.
"""

from ..protocol.registry import register
from .consensus import protocol as consensus_protocol  # noqa: F401  (registers graph-consensus, consensus-baseline)
from .functional import protocol as functional_protocol  # noqa: F401  (registers functional-quantile, functional-statistics)
from .vertical import protocol as vertical_protocol  # noqa: F401  (registers vertical-sharing, vertical-scoring)
from . import vertical_experts

for _module in (vertical_experts,):
    register(_module.PROTOCOL)
