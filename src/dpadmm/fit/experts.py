"""The label party's side of a deployment of the experts protocol (:mod:`dpadmm.algorithms.experts`): one round in
which every feature party fits its own DP model on the labels it is sent and keeps it."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..algorithms.experts.messages import FitRequest
from ..backends.base import PartySpec
from . import runner


def fit_parties(backend, specs: Sequence[PartySpec], labels, flip_probability: float | None, *,
                noise_seed: int | None) -> dict:
    """Send every party the labels (``flip_probability``: their public randomized-response flip probability) in
    the protocol's one round; returns each party's reply ``(message, events)``. One release per party, priced at
    its Setup (``rounds=1``). The backend stays open: the caller asks the parties for logits on new records later
    and closes it."""
    request = FitRequest(np.asarray(labels, dtype=np.float64), flip_probability)
    names = [s.name for s in specs]
    return runner.session(backend, specs, lambda b: b.step({name: request for name in names}, 0),
                          noise_seed=noise_seed, rounds=1, close=False, blas_threads=None).result


__all__ = ["fit_parties"]
