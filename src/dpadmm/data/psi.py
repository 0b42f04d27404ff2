"""Moved: PSI is :mod:`dpadmm.algorithms.psi` (party side and declaration), :mod:`dpadmm.fit.psi` (the coordinator's
alignment) and :mod:`dpadmm.data.alignment` (a party's own ids and caps); kept for compatibility."""

from ..algorithms.psi.party import (_FPR, _STRUCTURE, ServerConfig, _no_step, _psi, align, respond,  # noqa: F401
                                    setup_message, setup_party)
from ..algorithms.psi.protocol import PROTOCOL  # noqa: F401
from ..data.alignment import (_ALIGNED, PartyIds, PsiGate, _locked, _read_times, _signature, aligned_ids,  # noqa: F401
                              canonical_order, read_ids, setup_rows)
from ..fit.psi import Alignment, align_parties  # noqa: F401
