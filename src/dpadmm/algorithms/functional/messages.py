"""Functional quantile regression's typed records: the public settings, the messages between the hub and the
workers, the workers' and the hub's configurations and states, and the ``Setup`` view of
``setup_party_from_curves``'s arguments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

# ----------------------------------------------------------------------------- settings
@dataclass(frozen=True, eq=False)
class Settings:
    """The S settings run side by side (arrays of shape (S,)); all public.

    ``tau`` quantile levels in (0, 1); ``shift`` added to y (the simulation's τ-dependent error
    centring); ``noise_multiplier`` z = σ/Δ (0: no noise); ``lam`` λ ≥ 0; ``eps_iter``/``delta_iter``
    the per-iteration budget entering the Thm 2 step size (inf/1 without privacy).
    """

    tau: np.ndarray
    shift: np.ndarray
    noise_multiplier: np.ndarray
    lam: np.ndarray
    eps_iter: np.ndarray
    delta_iter: np.ndarray

    @staticmethod
    def make(tau, *, shift=0.0, noise_multiplier=0.0, lam=0.05, eps_iter=math.inf, delta_iter=1.0) -> "Settings":
        arrs = np.broadcast_arrays(*(np.atleast_1d(np.asarray(v, float)) for v in
                                     (tau, shift, noise_multiplier, lam, eps_iter, delta_iter)))
        return Settings(*(np.ascontiguousarray(a) for a in arrs))

    @property
    def size(self) -> int:
        return self.tau.shape[0]


# ----------------------------------------------------------------------------- messages / states
class HubMessage(NamedTuple):
    """Hub → workers: the round number, the consensus ``w^{l−1}`` (G, S, K) and the penalty ρ_l of the
    coming round (``None``: the configured ρ; set by residual balancing, a function of released values)."""

    round: int
    w: np.ndarray
    rho: float | None = None


class PartyMessage(NamedTuple):
    """Workers → hub: ``w̃_i^l`` and ``γ_i^{l−1}`` (G, W, S, K) [Zhou, Alg. 2]."""

    w_tilde: np.ndarray
    gamma: np.ndarray


class PartyState(NamedTuple):
    w: np.ndarray
    w_tilde: np.ndarray
    gamma: np.ndarray
    w_hub: np.ndarray
    rho: float = math.nan  # ρ of the last local step (for the deferred dual update); nan: the configured ρ


@dataclass(frozen=True, eq=False)
class PartyConfig:
    """What a party (one worker, or a virtual party of W workers) holds; A and y never leave it."""

    name: str
    A: np.ndarray  # (G, W, m, K) clipped scores (+ intercept column last if fit_intercept)
    y: np.ndarray  # (G, W, m)
    settings: Settings
    rho: float
    n_workers: int  # M over all parties (for λ/M)
    penalty: str = "l1"
    l1_ratio: float = 0.5
    fit_intercept: bool = False
    local_step: str = "linearized"
    step: str = "paper"
    c1: float = 1.0
    c2: float = 1.0
    c_w: float = 1.0
    eta0: float = 1.0
    decay_start: float = math.inf
    smooth: tuple[float, float, float] = (0.0, 1.0, 0.0)  # (h_0, q, h_min) of :func:`bandwidth`; h_0 = 0: subgradient
    newton_tol: float = 1e-10
    emit_events: bool = True
    worker_names: tuple[str, ...] = ()
    AT: np.ndarray | None = None  # (G, W, K, m) contiguous transpose of A, built by make_party
    AT32: np.ndarray | None = None  # float32 copy of AT (products with 0/1 masks)
    Ys: np.ndarray | None = None  # (G, W, m, S) responses y + shift per setting
    colsum: np.ndarray | None = None  # (G, W, K) Σ_j A_j

    @property
    def m(self) -> int:
        return self.A.shape[2]

    @property
    def K(self) -> int:
        return self.A.shape[3]


@dataclass(frozen=True, eq=False)
class HubConfig:
    """The central machine: ρ, the parties, the batch shape and the output rule."""

    rho: float
    party_names: tuple[str, ...]
    shape: tuple[int, int, int]  # (G, S, K)
    average_last: float = 0.0  # 0: output w^L [Zhou, Alg. 2]; f ∈ (0, 1]: mean of w^l over the last f·L rounds
    rounds: int = 1
    tol: float = 0.0
    rho_in_objective: float | None = None
    adapt_rho: bool = False  # residual balancing [Boyd et al. 2011, §3.4.1]: ρ ×/÷ 2 when one residual is 10× the other


class HubState(NamedTuple):
    round: int
    w: np.ndarray
    w_sum: np.ndarray
    n_sum: int
    primal_residual: float
    dual_residual: float
    rho: float = math.nan  # ρ_l of the coming round

    @property
    def output(self) -> np.ndarray:
        """The released estimate: w^L, or the running average (post-processing of released w^l)."""
        return self.w_sum / self.n_sum if self.n_sum else self.w


class FunctionalOptions(NamedTuple):
    """The run's public constants a worker (or a virtual party of workers) is set up with (the coordinator's choices,
    sent field by field and checked at the party, :func:`dpadmm.protocol.check_setup`; its policy checks the
    configuration made from them, :mod:`.policy`). A mapping of these fields is built into the record by name; the
    fields become :class:`PartyConfig`'s."""

    #: ρ: the ADMM penalty
    rho: float
    #: M: the number of workers over all parties (for λ/M)
    n_workers: int
    #: the penalty: ``"l1"``, ``"l2"`` or ``"elasticnet"`` (with ``l1_ratio``)
    penalty: str = "l1"
    l1_ratio: float = 0.5
    #: whether the worker appends an intercept column to its scores (:func:`.party.setup_party_from_curves`)
    fit_intercept: bool = False
    #: the local update: ``"linearized"`` (one linearised step, [Zhou]) or an exact local solve (:mod:`.local`)
    local_step: str = "linearized"
    #: the step-size rule (:func:`.rules.step_size`): ``"paper"``, ``"constant"`` …
    step: str = "paper"
    #: c_1: the score clip entering the sensitivity; c_2, c_w: the constants of [Zhou]'s step and noise rules
    c1: float = 1.0
    c2: float = 1.0
    c_w: float = 1.0
    #: η_0: the initial step size
    eta0: float = 1.0
    #: the round from which the step decays (inf: never)
    decay_start: float = math.inf
    #: (h_0, q, h_min) of the smoothing bandwidth (:func:`.rules.bandwidth`); h_0 = 0: the subgradient
    smooth: tuple = (0.0, 1.0, 0.0)
    #: the exact local solve's tolerance
    newton_tol: float = 1e-10
    #: whether the party reports its releases' privacy events
    emit_events: bool = True
    #: the names of the workers this party holds (its own name for one worker)
    worker_names: tuple = ()


class Setup(NamedTuple):
    """``setup_party_from_curves``'s arguments by name (the Setup message carries them by name)."""

    name: str
    X: Any  # the worker's curves: a PartyData reference to its own file, or an array in a simulation
    y: Any  # its responses (likewise)
    basis: Any  # the public basis (kernels.fpca.Basis)
    score_scale: Any  # public standardisation of the scores
    y_loc: float  # public location of the response
    y_scale: float  # public scale of the response
    clip: float | None  # the score clip c1 on the standardised scores [Zhou, Lemma 2]; None: no clip, non-private
    settings: Settings
    options: FunctionalOptions


class ScoresSetup(NamedTuple):
    """``party.setup_party``'s arguments by name: a worker set up from its scores on the basis (the simulations of
    [Zhou]'s experiments; not served)."""

    name: str
    A: Any  # the worker's scores (an array: a simulation)
    y: Any
    settings: Settings
    options: FunctionalOptions
