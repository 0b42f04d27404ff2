"""One folder per algorithm: typed messages and setups, pure per-party steps, policy hooks, a report, and on
top a ``protocol.py`` that declares the party's protocol and registers it (:func:`dpadmm.protocol.register`).

Importing this package imports every folder's ``protocol.py`` below — the list of the protocols a party can
serve — so the registry is filled by these imports (and only by them: a folder's modules never import its
``protocol.py``).
"""

from .consensus import protocol as consensus_protocol  # noqa: F401  (graph-consensus, consensus-baseline)
from .encrypted import protocol as encrypted_protocol  # noqa: F401  (vertical-encrypted)
from .experts import protocol as experts_protocol  # noqa: F401  (vertical-experts)
from .functional import protocol as functional_protocol  # noqa: F401  (functional-quantile, functional-statistics)
from .psi import protocol as psi_protocol  # noqa: F401  (psi-align)
from .vertical import protocol as vertical_protocol  # noqa: F401  (vertical-sharing, vertical-scoring)
from .gossip import protocol as gossip_protocol  # noqa: F401  (noisy-gradient-gossip)
