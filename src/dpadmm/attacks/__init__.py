"""Attacks on the released messages of the library's protocols (to show what a defence buys).

- :mod:`dpadmm.attacks.kkt`: recover one training point of a consensus node from its broadcast
  models when the node's penalties η_i(t) and θ are public [Zhang, §6.2, App. E].
- :mod:`dpadmm.attacks.labels`: a passive party of vertical ADMM sharing infers the training labels
  from what the coordinator sends it (measured on canary records).
"""

from .kkt import KKTAttackResult, kkt_reconstruct, run_kkt_attack

__all__ = ["KKTAttackResult", "kkt_reconstruct", "run_kkt_attack"]
