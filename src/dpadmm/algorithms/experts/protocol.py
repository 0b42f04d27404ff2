"""The experts folder's declaration, registered by name: ``vertical-experts`` (the feature party of the vertical
experts protocol over the network, :mod:`.party`: it fits its DP model once, keeps it, and answers only logits on
new records).

Nothing in this folder imports this module: it sits on top, and :mod:`dpadmm.algorithms` imports it so
that the registry (:mod:`dpadmm.protocol.registry`) knows the name.
"""

from __future__ import annotations

from ...protocol.registry import register
from ...protocol.spec import Protocol
from .messages import FitRequest, Setup
from .party import describe, fit_step, is_private, load, logit, model, setup_party
from .policy import EXPERTS

PROTOCOL = register(Protocol(
    "vertical-experts", setup_party, fit_step, None, handlers={"logit": logit},
    types=(FitRequest,), load=load, describe=describe, model=model,
    private=is_private, data_fields=("train", "score", "model"), policy=EXPERTS, setup_type=Setup))
