"""Vertical experts' typed records: the one message the label party sends (round 0), the feature party's rows,
configuration and state, and the ``Setup`` view of ``setup_party``'s arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple

import numpy as np


@dataclass(frozen=True, eq=False)
class Rows:
    """A block the party read from one of its own files, with the ids of its rows (``None``: sent as an array)."""

    X: Any
    ids: np.ndarray | None = None
    path: str | None = None  # the file it was read from (a scoring block from the training file itself is refused)


class FitRequest(NamedTuple):
    """Round 0: the labels the label party sends (±1, one per training row; the regression target: one number per
    row in [−1, 1], the label scaled by its declared range) and the public flip probability of their randomized
    response (``None``: exact labels)."""

    labels: np.ndarray
    flip_probability: float | None = None


@dataclass(frozen=True, eq=False)
class ExpertConfig:
    name: str
    X: Any  # the party's training block (rows aligned to the label party's)
    score: Mapping[str, Any] = field(default_factory=dict)  # key -> the party's rows of a NEW-records file
    R: float = 1.0
    lam: float = 1e-3
    noise_multiplier: float | None = None
    noise_norm: float = 0.5
    model: Any = None  # a scoring run: the party's own model file (vertical_scoring.PartyModel); no fit
    bounds: Any = None  # the party's column bounds at its fit: "dp" (its DP range estimate), (lo, hi) or None
    range_noise_multiplier: float | None = None  # the DP range estimate's (bounds="dp" in a private fit)
    loss: str = "logistic"  # the target: "logistic" (±1 labels) or a regression loss of .regression ("squared", "huber")
    huber_kappa: float = 0.5  # the Huber threshold (scaled label units), with loss="huber"


class ExpertState(NamedTuple):
    coef: np.ndarray | None = None  # the party's DP coefficient: never sent
    flip_probability: float | None = None
    facts: dict | None = None
    lo: np.ndarray | None = None  # the column bounds of its fit (bounds given at Setup): its new records use them too
    hi: np.ndarray | None = None
    prepared: dict | None = None  # the public facts of its fit and its preparation (prepare.public_facts)


class Setup(NamedTuple):
    """``setup_party``'s arguments by name (the Setup message carries them by name)."""

    name: str
    train: Any  # the training block: a PartyData reference to the party's training file (or an array, simulated)
    score: Any = None  # key -> a PartyData reference to a NEW-records file
    R: float = 1.0
    lam: float = 1e-3
    noise_multiplier: float | None = None
    noise_norm: float = 0.5
    model: Any = None  # a scoring run: a PartyData reference to the party's own model file
    flip_probability: float | None = None
    bounds: Any = None  # column bounds of the fit: "dp", (lo, hi) or None (a party under a policy: its operator's)
    range_noise_multiplier: float | None = None  # the DP range estimate's, with bounds="dp"
    loss: str = "logistic"  # "logistic" (binary) or "squared" / "huber" (regression, labels scaled to [-1, 1])
    huber_kappa: float = 0.5
