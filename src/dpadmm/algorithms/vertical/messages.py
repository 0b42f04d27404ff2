"""Vertical ADMM sharing's typed records: the messages that cross the trust boundary, the party's and the
coordinator's configurations and states, and the Setup view of ``setup_party``'s arguments.

See :mod:`dpadmm.algorithms.vertical.party` for the recursion (its docstring holds the symbol table).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple

import numpy as np

from ...kernels.linalg import XStepSolver
from ...kernels.losses import Loss
from ...kernels.regularizers import Regularizer
from ...privacy.events import FEATURE_COLUMN, RECORD_REPLACE
from ...privacy.mechanisms import label_sensitivity

MECHANISMS = ("gaussian", "paper")
RELATIONS = {"feature_column": FEATURE_COLUMN, "record": RECORD_REPLACE}


# ----------------------------------------------------------------------------- messages
class CoordinatorMessage(NamedTuple):
    """Coordinator → every party: ``s̃ − z`` and ``y`` (N-vectors) and public scalars."""

    round: int
    residual: np.ndarray
    dual: np.ndarray
    rho: float


class PartyMessage(NamedTuple):
    """Party → coordinator: the (noisy) partial score ``D_m x̃_m`` (N-vector)."""

    share: np.ndarray


# ----------------------------------------------------------------------------- party
class Bounds(NamedTuple):
    """Radii of [Hu, Assumption 2.1]: ‖x_m‖ ≤ x, ‖y‖ ≤ y (dual), ‖z‖ ≤ z. The paper uses one b_1 for all."""

    x: float
    y: float
    z: float


@dataclass(frozen=True)
class PrivacySpec:
    """How a party perturbs its share. Exactly one of ``noise_multiplier`` (σ/C, with C the
    mechanism's sensitivity at the current ρ) or ``noise_scale`` (raw σ) is set.

    ``mechanism="gaussian"``: ``clip`` is V (‖v‖ ≤ V), ``clip_inf`` V_∞ (record relation),
    ``relation`` one of :data:`RELATIONS`, ``column_change`` Δ_c of the column relation.
    ``mechanism="paper"``: ``c1``, ``bounds``, ``n_parties`` enter [Hu, Lemma 1].
    """

    noise_multiplier: float | None = None
    noise_scale: float | None = None
    c1: float = 1.0
    bounds: "Bounds | None" = None
    n_parties: int = 1
    mechanism: str = "paper"
    relation: str = "feature_column"
    clip: float | None = None
    clip_inf: float | None = None
    column_change: float = 1.0


@dataclass(frozen=True, eq=False)
class PartyConfig:
    """Everything party m holds. ``D`` never leaves the party."""

    name: str
    D: Any  # (N, d_m) ndarray or CSR matrix
    DT: Any  # its transpose (a view of D), for D_mᵀv
    solver: XStepSolver
    lam_sum: float
    reg: Regularizer | None
    basis: np.ndarray | None = None
    privacy: PrivacySpec | None = None
    bound: float | None = None  # projection radius of x_m (b_x) when a guarantee is reported
    eval_blocks: Mapping[str, np.ndarray] = field(default_factory=dict)
    damping: float = 0.0
    inner_max_iter: int = 500
    inner_tol: float = 1e-10
    labels: np.ndarray | None = None  # only the label party holds them (its own data); used by its refit


class PartyState(NamedTuple):
    x: np.ndarray
    share: np.ndarray


# ----------------------------------------------------------------------------- coordinator
@dataclass(frozen=True)
class LabelPrivacy:
    """The coordinator's label-side mechanism: ``noise_multiplier`` (σ_L / sensitivity) or a raw
    ``noise_scale``; ``clip`` C bounds |ℓ'| coordinatewise (a no-op for the logistic loss, whose
    label gap is 1 anyway); see :func:`dpadmm.privacy.mechanisms.label_sensitivity`."""

    noise_multiplier: float | None = None
    noise_scale: float | None = None
    clip: float = 1.0
    rounds: int | None = None  # the run's T: round T releases nothing (no party step would use it)


@dataclass(frozen=True, eq=False)
class CoordinatorConfig:
    """What the coordinator (the label holder) holds: labels and public hyperparameters."""

    labels: np.ndarray
    loss: Loss
    lam: float
    rho: float
    party_names: tuple[str, ...]
    bounds: Bounds | None = None  # projection radii of z and y when a guarantee is reported
    fit_intercept: bool = True
    adaptive_rho: bool = False
    relaxation: float = 1.0
    mu: float = 10.0
    tau: float = 2.0
    tol: float = 1e-6
    eval_labels: Mapping[str, np.ndarray] = field(default_factory=dict)
    label_privacy: LabelPrivacy | None = None

    @property
    def label_gap(self) -> float:
        """sup_s |ℓ'(s, Y) − ℓ'(s, Y')| over label pairs: 1 for the logistic loss, ∞ otherwise."""
        return 1.0 if self.loss.name == "logistic" else math.inf

    def label_sensitivity(self) -> float:
        return label_sensitivity(label_gap=self.label_gap, clip=self.label_privacy.clip,
                                 fit_intercept=self.fit_intercept)


class CoordinatorState(NamedTuple):
    round: int
    z: np.ndarray
    dual: np.ndarray
    total: np.ndarray
    rho: float
    primal_residual: float
    dual_residual: float
    intercept: float = 0.0
    passive_total: np.ndarray | None = None  # Σ of the other parties' latest shares (label-party refit)



class VerticalOptions(NamedTuple):
    """The public constants a party is set up with (the coordinator's choices, sent field by field and checked at the
    party, :func:`dpadmm.protocol.check_setup`; its policy checks the configuration made from them, :mod:`.policy`).
    A mapping of these fields is built into the record by name."""

    #: λ_s = N·λ: the summed scaling of the party's ridge term (the paper's N Σ-normalisation)
    lam_sum: float
    #: the regulariser R of its x-step (:mod:`dpadmm.kernels.regularizers`); None: no penalty
    reg: Regularizer | None = None
    #: how the party perturbs its share (None: a non-private party, no noise)
    private: PrivacySpec | None = None
    #: the projection radius b_x of x_m when a guarantee is reported ([Hu, Assumption 2.1]); None: no projection
    bound: float | None = None
    #: the x-step damping in [0, 1) (0: the exact ADMM step)
    damping: float = 0.0
    #: the x-step solver: ``"auto"``, ``"eigh"`` or ``"cg"`` (:func:`.party.make_party`)
    solver: str = "auto"
    #: a non-private cg party's inexactness (each solve stops once it reduced the warm-start residual by this factor)
    cg_reduction: float = 0.3
    #: ``{key: block}`` of the party's own eval blocks (PartyData references, or arrays in a simulation); None: none
    eval_blocks: Mapping[str, Any] | None = None
    #: check at the party that its rows are unit-norm ([Hu, Assumption 2.3]; set for private fits on its own files)
    require_unit_rows: bool = False
    #: the label party's own labels (it is the coordinator's organisation; its refit uses them); None: not held
    labels: Any = None


class Setup(NamedTuple):
    """``setup_party``'s arguments by name (the Setup message carries them by name)."""

    name: str
    D: Any  # the party's block: a PartyData reference to its own file, or an array in a simulation
    options: VerticalOptions


class ScoringSetup(NamedTuple):
    """``scoring.setup_party``'s arguments by name: the new records and the party's own model (``model``: a PartyData
    reference to its model file)."""

    name: str
    X: Any  # the party's new records: a PartyData reference, or an array in a simulation
    model: Any  # a PartyData reference to the party's own model file (read by scoring.load)


class SGDSetup(NamedTuple):
    """``sgd.setup_party``'s arguments by name (the SGD baseline: a non-private simulation, never served)."""

    name: str
    D: Any
    options: Mapping[str, Any]
