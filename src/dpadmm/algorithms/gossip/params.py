"""The public parameters of a gossip fit, checked once, and the one place ε becomes the run's schedule and noise.

:class:`GossipParams` holds what an operator chooses (the estimator's public gossip parameters and the driver's
finer knobs); its checks run when it is built, so a bad value is refused with one line naming it before any data
is read. :func:`plan` turns it and the public sizes (n, d, N) into the :class:`Plan` every node runs: the schedule
(:func:`.schedule.default_schedule`), the Gaussian noise multiplier of the whole run (:func:`.report.
noise_multiplier_for`), the DP range's quantile level and the step. The driver, the CLI and the experiments read
the same :class:`Plan`; nothing outside this folder turns ε into rounds or noise."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._validation import check_int, check_open_unit, check_positive
from ...exceptions import InvalidParameterError
from . import mechanism as mech
from .node import step_size
from .targets import Target
from .report import noise_multiplier_for
from .schedule import DEFAULT_DELTA, DEFAULT_RANGE_ROUNDS, DEFAULT_RIDGE, average_from, default_schedule
from .validation import VALIDATION_SHARE, slice_epsilon


@dataclass(frozen=True)
class GossipParams:
    """A gossip fit's parameters (``ConsensusLogisticRegression``'s with ``epsilon``; ``dpadmm consensus
    --epsilon``).

    ``epsilon``: the per-node (ε, ``delta``)-DP budget (None: no noise). ``rounds``: gradient rounds T (None: the
    public schedule). ``range_rounds``: the DP column range's bisection rounds K (0 with declared ``bounds``, a
    pair (lo, hi) of length-d sequences, checked against d by :meth:`column_bounds`). ``row_clip``: R (None: √d).
    ``momentum``/``tail``: the heavy-ball β and the tail share of the model's mean (None: the schedule's).
    ``recalibrate``: each node's own choice on its own rows (None: in private fits). ``monitor``: un-noised
    training metrics (None: in non-private fits). ``normalize`` is refused: it erases each column's scale.
    ``loss``: ``logistic`` (±1 labels), ``squared``/``huber`` (real labels; ``huber_delta`` δ in units of half the
    label range) or ``multinomial`` (``classes`` K ≥ 3, labels 0…K−1) — :mod:`.targets`. ``target_bounds``: the
    declared label range (lo, hi) of a regression (None: a DP estimate, the label one more column of the range
    counts; needed when ``bounds`` are declared). ``validation_share``: the share of ε a private binary run spends
    on the DP comparison of the consensus model with the DP base rate, capped where more resolves nothing
    (:func:`.validation.slice_epsilon`; 0: none). ``tol``: a
    non-private run stops once every node's broadcast moved by ≤ tol in a round (0: every round; a private run's
    rounds are fixed by its budget, and ``tol`` > 0 with ``epsilon`` is refused)."""

    epsilon: float | None = None
    delta: float = DEFAULT_DELTA
    rounds: int | None = None
    range_rounds: int = DEFAULT_RANGE_ROUNDS
    bounds: Any = None
    row_clip: float | None = None
    momentum: float | None = None
    ridge: float = DEFAULT_RIDGE
    tail: float | None = None
    recalibrate: bool | None = None
    monitor: bool | None = None
    normalize: bool = False
    loss: str = "logistic"
    classes: int = 2
    huber_delta: float = 1.0
    target_bounds: Any = None
    validation_share: float = VALIDATION_SHARE
    tol: float = 0.0

    def __post_init__(self):
        target = Target(self.loss, self.classes, self.huber_delta)  # its checks: one line naming the value
        if self.target_bounds is not None:
            try:
                lo, hi = (float(b) for b in self.target_bounds)
            except (TypeError, ValueError):
                raise InvalidParameterError("target_bounds must be a pair (lo, hi) of numbers.") from None
            if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo) or not target.regression:
                raise InvalidParameterError(f"target_bounds must be finite lo < hi, for a regression loss; got "
                                            f"{self.target_bounds!r} with loss={self.loss!r}.")
        elif target.regression and (self.bounds is not None or self.range_rounds == 0):
            raise InvalidParameterError("a regression without a DP range (declared column bounds, or range_rounds=0) "
                                        "needs declared label bounds: give target_bounds=(lo, hi).")
        if self.epsilon is not None:
            check_positive("epsilon", self.epsilon)
        check_open_unit("delta", self.delta)
        if self.rounds is not None:
            check_int("rounds", self.rounds)
        check_int("range_rounds", self.range_rounds, minimum=0)
        check_positive("tol", self.tol, allow_zero=True)
        if self.tol > 0 and self.epsilon is not None:
            raise InvalidParameterError(f"tol={self.tol!r} stops a non-private run early; a private run's rounds are "
                                        "fixed by its budget (the accountant prices them): drop tol or epsilon.")
        if self.row_clip is not None:
            check_positive("row_clip", self.row_clip)
        if self.momentum is not None and not 0.0 <= float(self.momentum) < 1.0:
            raise InvalidParameterError(f"momentum must be in [0, 1), got momentum={self.momentum!r}.")
        check_positive("ridge", self.ridge, allow_zero=True)
        if self.tail is not None and not 0.0 <= float(self.tail) <= 1.0:
            raise InvalidParameterError(f"tail must be in [0, 1], got tail={self.tail!r}.")
        if self.recalibrate is not None and not isinstance(self.recalibrate, (bool, np.bool_)):
            raise InvalidParameterError(f"recalibrate must be True, False or None (in private fits), got "
                                        f"recalibrate={self.recalibrate!r}.")
        if not (isinstance(self.validation_share, (int, float, np.floating)) and 0.0 <= self.validation_share < 1.0):
            raise InvalidParameterError(f"validation_share must be in [0, 1), got validation_share="
                                        f"{self.validation_share!r}.")
        if self.normalize:
            raise InvalidParameterError("normalize=True rescales whole rows and erases each column's scale; the gossip "
                                        "protocol bounds every column itself (bounds=, or a DP range): drop normalize.")

    @property
    def target(self) -> Target:
        return Target(self.loss, self.classes, self.huber_delta)

    @property
    def private(self) -> bool:
        return self.epsilon is not None

    @property
    def validates(self) -> bool:
        """A private binary run with a validation share: it spends that share on :mod:`.validation`."""
        return self.private and self.target.loss == "logistic" and float(self.validation_share) > 0.0

    def column_bounds(self, d: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The declared bounds as two (d,) arrays (None: a DP range estimate), refused unless d finite lo < hi."""
        if self.bounds is None:
            return None
        try:
            lo, hi = (np.asarray(b, dtype=np.float64).reshape(-1) for b in self.bounds)
        except (TypeError, ValueError):
            raise InvalidParameterError("bounds must be a pair (lo, hi) of length-d sequences.") from None
        if lo.shape != (d,) or hi.shape != (d,) or not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))
                                                          and np.all(hi > lo)):
            raise InvalidParameterError(f"bounds must be {d} finite pairs with lo < hi, one per column.")
        return lo, hi


@dataclass(frozen=True)
class Plan:
    """What every node of one run is told (public): T, K, the row clip R, the step η, heavy-ball β, the tail mean's
    first round, the noise multiplier z of every release, the DP range's quantile level and the schedule's regime."""

    rounds: int
    range_rounds: int
    row_clip: float
    step: float
    momentum: float
    tail: float
    average_from: int
    noise_multiplier: float
    quantile: float
    regime: str


def plan(params: GossipParams, n_total: int, d: int, n_nodes: int, *, noise: bool = True,
         validate: bool | None = None) -> Plan:
    """The run's public plan from ``params`` and the public sizes: the schedule of :func:`default_schedule` (the
    caller's ``rounds``/``momentum``/``tail`` kept), then z calibrated over every release of one node — the range
    rounds' counts and the T gradient sums, each at its sensitivity — so the run composes to (ε, δ).
    ``noise=False``: the schedule alone (z and the quantile left 0; for a progress bar's count of rounds).
    ``validate`` (None: ``params.validates``): the rounds get ε minus the validation's slice
    (:func:`.validation.slice_epsilon`: ``validation_share``·ε, capped once it resolves d nats)."""
    R = math.sqrt(d) if params.row_clip is None else float(params.row_clip)
    K = 0 if params.bounds is not None else int(params.range_rounds)
    tg = params.target
    logistic = tg.loss == "logistic"
    eps = params.epsilon  # the rounds' share of ε
    if eps is not None and (params.validates if validate is None else validate):
        eps = float(eps) - slice_epsilon(float(eps), params.validation_share, n_total, n_nodes, d)
    sched = default_schedule(n_total, d, eps, n_nodes=n_nodes, delta=params.delta, range_rounds=K,
                             row_clip=R, ridge=params.ridge, target=None if logistic else tg)
    T = sched.rounds if params.rounds is None else int(params.rounds)
    tail = sched.tail if params.tail is None else float(params.tail)
    momentum = sched.momentum if params.momentum is None else float(params.momentum)
    nm = q = 0.0
    if noise:
        dr = d + (tg.regression and params.target_bounds is None)  # the label: one more range column
        sens = [mech.range_sensitivity(dr, labels=logistic)] * min(K, 1) + [mech.range_sensitivity(dr)] * (K - 1) \
            + [mech.gradient_sensitivity(R) if logistic else tg.sensitivity(R)] * T
        nm = 0.0 if eps is None else noise_multiplier_for(eps, params.delta, sens)
        q = mech.quantile_level(nm, dr, n_total, n_nodes)
    eta = step_size(R, params.ridge, None if logistic else tg.curvature)
    return Plan(T, K, R, sched.step_scale * eta, momentum, tail, average_from(T, tail), nm, q, sched.regime)


__all__ = ["GossipParams", "Plan", "plan"]
