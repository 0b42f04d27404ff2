"""Decentralised consensus logistic regression: noisy-gradient gossip (private) or M-ADMM [Zhang].

Data sit on the nodes of a connected graph; nodes exchange only what the protocol declares with their neighbours
(:mod:`dpadmm.algorithms.gossip`, :mod:`dpadmm.algorithms.consensus` for the recursions)."""

from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import NotFittedError

from .._validation import as_float_matrix, binary_labels, check_choice, check_int, check_random_state, noise_seed
from ..algorithms.consensus import driver as consensus_driver
from ..algorithms.consensus.params import DEFAULT_C, DEFAULT_REG_WEIGHT, MADMMParams
from ..algorithms.gossip import driver as gossip_driver
from ..algorithms.gossip import mechanism as gossip_mech
from ..algorithms.gossip.params import GossipParams
from ..algorithms.gossip.schedule import DEFAULT_DELTA as GOSSIP_DELTA
from ..backends import get_backend
from ..data.graphs import Nodes, make_graph, split_indices
from ..exceptions import InvalidDataError, InvalidParameterError
from ..protocol import PartyData
from ._sklearn import binary_classifier_tags, is_block_list, one_matrix, target

#: the M-ADMM parameters (:class:`~dpadmm.algorithms.consensus.params.MADMMParams`), by their estimator names
MADMM_FIELDS = ("C", "reg_weight", "theta", "theta_growth", "eta", "eta_growth", "perturbation", "alpha",
                "alpha_growth", "max_iter", "tol", "normalize", "batch", "record_path", "newton_tol",
                "fallback_epsilon", "monitor")


class ConsensusLogisticRegression(ClassifierMixin, BaseEstimator):
    """L2-regularised logistic regression learned by N nodes of a graph with M-ADMM [Zhang, eq. 10–11],
    optionally differentially private by penalty perturbation [Zhang, Alg. 1].

    Objective [Zhang, eq. 1]: ``Σ_i (C/B_i) Σ_n log(1 + exp(−y fᵀx)) + (reg_weight/2)‖f‖²`` (no intercept;
    ``reg_weight`` is the paper's ρ, renamed so it does not collide with ADMM's penalty).

    Parameters
    ----------
    C : loss weight C > 0 (the paper also asks C ≤ B_i). Larger C = weaker regularisation but a larger
        privacy loss P(t) (linear in C).
    reg_weight : ρ > 0 of ``(ρ/N) R(f)`` per node, R = ½‖f‖² (1-strongly convex, as Thm 4.1 needs).
    n_nodes, topology : the network: ``ring | line | star | complete | erdos:p``, an edge-list path or a
        networkx graph; it must be connected. Ignored ``n_nodes`` when X is a list of node datasets.
    split, uneven_ratio : how fit(X, y) spreads samples: ``even`` or ``uneven`` (sizes ∝ linspace(1, ratio, N)).
    theta, theta_growth : dual step θ (scalar, per node, or callable (i, t)); geometric growth optional.
        Alg. 1's privacy condition ``2c_1 < (B_i/C)(ρ/N + 2θV_i)`` is checked for pp/dvp.
    eta, eta_growth : private penalties ``η_i(t) = eta_i · eta_growth_i^{t−1}`` (or a callable (i, t)); default
        (None) η ≡ θ (conventional ADMM). Convergence [Zhang, Thm 3.1] needs ``η_i(t+1) ≥ η_i(t) ≥ θ``:
        a :class:`~dpadmm.algorithms.consensus.schedules.ConvergenceConditionWarning` says when not.
    perturbation : ``none`` (M-ADMM), ``pp`` (penalty perturbation), ``dvp`` (η ≡ θ, Zhang & Zhu 2017),
        ``pvp`` (noise on f_i before broadcast; not covered by [Zhang, Thm 4.1]: ε = ∞ reported).
    alpha, alpha_growth : noise parameter ``α_i(t) = alpha_i · alpha_growth_i^{t−1}`` (density ∝ exp(−α‖ε‖));
        required for pp/dvp/pvp; ``inf`` = no noise.
    normalize : private runs need ‖x‖₂ ≤ 1 for every row (Thm 4.1). False: refuse other data;
        True: rescale rows with ‖x‖ > 1 to norm 1.
    batch : True runs all nodes as one stacked block (fast, in one process); False one party per node
        (what a distributed backend runs). Same step function; with noise the two draw different streams.
    record_path : keep every broadcast f_i(t) in ``path_`` (T × N × d), e.g. for :mod:`dpadmm.attacks`.
    tol : stop early (non-private runs only) once every ‖f_i(t) − f_i(t−1)‖ and the consensus error are ≤ tol
        (gossip: once every node's broadcast moved by ≤ tol in a round; a private run ignores it, its rounds priced).
    fallback_epsilon : private runs (pp/dvp): pure-DP budget per node, on top of P(T), for the DP base rate
        (half) and the accounted comparison model vs DP base rate (half) of
        :mod:`dpadmm.algorithms.consensus.baseline`; the better is handed over (``handed_over_``). Margins
        of a handed-over model are clipped to ±4 (probabilities in [0.018, 0.982]). ``None`` or 0: no
        fallback (the model as M-ADMM left it).

    epsilon : the per-node (ε, ``delta``)-DP budget of a private fit by **noisy-gradient gossip**
        (:mod:`dpadmm.algorithms.gossip`, the default private protocol): each node releases its clipped gradient
        sum with Gaussian noise every round, neighbours average the broadcast models; a model with an intercept,
        on raw-unit columns bounded per column (``bounds`` or a DP range estimate paid from ``epsilon``).
        ``None`` with ``perturbation`` none: non-private M-ADMM. Not with ``perturbation`` pp/dvp/pvp (those
        take ``alpha``; kept for reproducing [Zhang]).
    protocol : ``"auto"`` (gossip when ``epsilon`` is given, M-ADMM otherwise), ``"admm"`` or ``"gossip"``
        (``"gossip"`` without ``epsilon``: the same protocol without noise).
    delta, rounds, bounds, row_clip : gossip only: δ of the budget (default 1e-5); gradient rounds T (default: the
        public schedule of ``algorithms/gossip/schedule.py``, ``regime_`` names it and ``momentum_`` is its
        heavy-ball β); declared column bounds ``(lo, hi)`` (two length-d sequences; default: a DP estimate of each
        column's range); the row clip R on the [−1, 1]-mapped columns (default √d: no row is clipped beyond its
        columns).

    recalibrate : gossip only: each node fits Platt scaling of its consensus model on its own rows
        (:mod:`dpadmm.algorithms.gossip.calibration`: nothing released, no ε; the node's own use) into
        ``node_coefs_``/``node_intercepts_``, which ``predict_proba(X, node=i)`` uses. ``None`` (default): in
        private fits; ``True``: also without noise; ``False``: never.

    Attributes
    ----------
    node_coefs_, node_intercepts_, calibration_ (gossip with ``recalibrate``): each node's recalibrated model
    (N × d, N) and its Platt (a_i, b_i) (N × 2); ``None`` otherwise.
    coefs_ (N × d node models), coef_ (the handed-over model: their mean, or 0 with ``intercept_`` =
    logit of the DP base rate when that is handed over), intercept_, handed_over_ (``"model"`` |
    ``"dp-base-rate"`` | None), dp_base_rate_, graph_, node_sizes_, history_ (``train_loss`` = L(t),
    ``objective``, ``consensus_error``, ``privacy_bound`` = P(t), …), privacy_ (PrivacyReport or None), n_iter_.
    """

    recalibrate = None  # an estimator pickled before the parameter existed (get_params, clone)

    def __init__(self, *, C: float = DEFAULT_C, reg_weight: float = DEFAULT_REG_WEIGHT, n_nodes: int = 5,
                 topology: Any = "ring", split: str = "even", uneven_ratio: float = 10.0, theta: Any = 0.5,
                 theta_growth: Any = 1.0, eta: Any = None, eta_growth: Any = 1.0, perturbation: str = "none",
                 alpha: Any = None, alpha_growth: Any = 1.0, max_iter: int = 100, tol: float = 0.0,
                 normalize: bool = False, batch: bool = True, record_path: bool = False, newton_tol: float = 1e-10,
                 random_state: Any = None, backend: Any = "inprocess", monitor: bool | None = None,
                 fallback_epsilon: float | None = 0.5, epsilon: float | None = None, protocol: str = "auto",
                 delta: float = GOSSIP_DELTA, rounds: int | None = None, bounds: Any = None,
                 row_clip: float | None = None, recalibrate: bool | None = None):
        self.recalibrate = recalibrate
        self.fallback_epsilon = fallback_epsilon
        self.epsilon = epsilon
        self.protocol = protocol
        self.delta = delta
        self.rounds = rounds
        self.bounds = bounds
        self.row_clip = row_clip
        self.C = C
        self.reg_weight = reg_weight
        self.n_nodes = n_nodes
        self.topology = topology
        self.split = split
        self.uneven_ratio = uneven_ratio
        self.theta = theta
        self.theta_growth = theta_growth
        self.eta = eta
        self.eta_growth = eta_growth
        self.perturbation = perturbation
        self.alpha = alpha
        self.alpha_growth = alpha_growth
        self.max_iter = max_iter
        self.tol = tol
        self.normalize = normalize
        self.batch = batch
        self.record_path = record_path
        self.newton_tol = newton_tol
        self.random_state = random_state
        self.backend = backend
        self.monitor = monitor

    # ------------------------------------------------------------------ parameters
    def _params(self) -> GossipParams | MADMMParams:
        """The fit's typed parameters (checked there): gossip's with ``epsilon`` or ``protocol='gossip'``, else
        M-ADMM's."""
        if self._use_gossip():
            return GossipParams(epsilon=self.epsilon, delta=self.delta, rounds=self.rounds, bounds=self.bounds,
                                row_clip=self.row_clip, recalibrate=getattr(self, "recalibrate", None),
                                monitor=self.monitor, normalize=self.normalize,
                                tol=self.tol if self.epsilon is None else 0.0)
        check_choice("split", self.split, ("even", "uneven"))
        if self.recalibrate:  # True or anything else set: M-ADMM hands over one model
            raise InvalidParameterError(f"recalibrate is for the gossip protocol (epsilon= or protocol='gossip'), got "
                                        f"recalibrate={self.recalibrate!r} with M-ADMM; leave it None or False.")
        return MADMMParams(**{k: getattr(self, k) for k in MADMM_FIELDS})

    def _private(self) -> bool:
        """A private fit reads its labels against the declared binary domain, never counting classes (T3)."""
        return self.epsilon is not None or self.perturbation != "none"

    def _node_data(self, X, y, seed: np.random.SeedSequence):
        if isinstance(X, (list, tuple)) and X and all(isinstance(x, PartyData) for x in X):  # each node's own file
            ys = y if y is not None else [PartyData(x.key, dict(x.params, part="y"), x.shape[:1]) for x in X]
            return list(X), list(ys), np.array([-1.0, 1.0])  # the node reads its labels as ±1 (consensus.node)
        if is_block_list(X):
            if y is None or not isinstance(y, (list, tuple)) or len(y) != len(X):
                raise InvalidDataError("with a list of node datasets X, give a list y of the same length.")
            Xs = [as_float_matrix(f"X[{i}]", x) for i, x in enumerate(X)]
            d = Xs[0].shape[1]
            if any(x.shape[1] != d for x in Xs):
                raise InvalidDataError("every node's X must have the same number of features.")
            y_all, classes = binary_labels("y", np.concatenate([np.asarray(v).ravel() for v in y]),
                                           private=self._private())
            sizes = np.cumsum([0] + [x.shape[0] for x in Xs])
            if y_all.shape[0] != sizes[-1]:
                raise InvalidDataError("every node's y must have one label per row of its X.")
            ys = [y_all[a:b] for a, b in zip(sizes[:-1], sizes[1:])]
            return Xs, ys, classes
        A = one_matrix(self, X, sparse=False)
        y_pm, classes = binary_labels("y", target(y, classes=True), A.shape[0], private=self._private())
        n = check_int("n_nodes", self.n_nodes, minimum=2)
        rng = np.random.default_rng(np.random.SeedSequence(seed.entropy, spawn_key=(2**20,)))
        idx = split_indices(A.shape[0], n, self.split, ratio=float(self.uneven_ratio), random_state=rng)
        return [A[i] for i in idx], [y_pm[i] for i in idx], classes

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None, *, callbacks: Sequence = (), **checkpoints):
        """Fit by noisy-gradient gossip (``epsilon`` given; ``checkpoints``: ``checkpoint_dir``, ``checkpoint_every``,
        ``resume_from``) or (private) M-ADMM. ``X``: one (n, d) matrix split over ``n_nodes`` nodes, or per-node lists;
        two classes."""
        unknown = sorted(set(checkpoints) - {"checkpoint_dir", "checkpoint_every", "resume_from"})
        if unknown:
            raise InvalidParameterError(f"fit() takes no {', '.join(unknown)}: its keyword arguments are callbacks, "
                                        "checkpoint_dir, checkpoint_every and resume_from.")
        self.__dict__.pop("n_features_in_", None)  # a refit is a new fit: any column count
        params = self._params()
        gossip = isinstance(params, GossipParams)
        if not gossip and any(v is not None for v in checkpoints.values()):  # the fallback releases after the rounds
            raise InvalidParameterError("checkpoints and resume are for the gossip protocol (epsilon= alone).")
        seed = check_random_state(self.random_state)  # data split and graph (not noise)
        Xs, ys, self.classes_ = self._node_data(X, y, seed)
        graph_rng = np.random.default_rng(np.random.SeedSequence(seed.entropy, spawn_key=(2**21,)))
        nodes = Nodes(Xs, ys, make_graph(self.topology, len(Xs), random_state=graph_rng))
        kw = dict(callbacks=callbacks, noise_seed=noise_seed(self.random_state))  # None: each node's own OS entropy
        if gossip:
            res = gossip_driver.fit(params, nodes, get_backend(self.backend), **kw, **checkpoints)
            d = Xs[0].shape[1]
            w = res.F.mean(axis=0)
            self._gossip, self._gossip_ledger, self._gossip_base_rate = (res.lo, res.hi, res.row_clip), res.ledger, \
                res.base_rate  # the column map; the DP base rate of the range rounds, for the CLI's baseline
            self.coefs_, self.intercepts_ = res.F[:, :d].copy(), res.F[:, d].copy()
            self.coef_, self.intercept_ = w[:d].copy(), float(w[d])
            own = res.node_models is not None  # each node's own choice (algorithms.gossip.choice), nothing released
            self.node_coefs_ = res.node_models[:, :d].copy() if own else None
            self.node_intercepts_ = res.node_models[:, d].copy() if own else None
            self.calibration_, self.node_choice_cv_ = res.calibration, res.choice_cv
            self.node_choice_, self.node_choice_reasons_, self.node_spaces_ = (
                (list(res.choices), list(res.reasons), list(res.spaces)) if own else (None, None, None))
            self.column_bounds_, self.bounds_source_ = np.column_stack([res.lo, res.hi]), res.bounds_source
            self.range_quantile_, self.noise_multiplier_ = res.quantile, res.noise_multiplier
            self._margin_clip = self.handed_over_ = self.dp_base_rate_ = self.comparison_ = None
            if res.validation is not None:  # the shared model's DP comparison (algorithms.gossip.validation)
                v = res.validation
                self.handed_over_, self.dp_base_rate_, self.comparison_ = v.handed_over, v.base_rate, v.difference
                self.comparison_threshold_, self._margin_clip = v.threshold, v.margin_clip
                if v.handed_over != "model":
                    self.coef_, self.intercept_ = np.zeros(d), float(math.log(v.base_rate / (1.0 - v.base_rate)))
            self.rounds_ = 0 if res.path is None else int(len(res.path))  # gradient rounds T
            self.range_rounds_ = int(res.rounds - self.rounds_)  # K (0 with declared bounds)
            self.converged_, self.path_, self.schedules_ = False, res.path, {}
            self.regime_, self.momentum_ = res.regime, res.momentum  # the public schedule's regime and β
        else:
            res = consensus_driver.fit(params, nodes, self.backend, **kw)
            self._gossip = None
            self.node_coefs_ = self.node_intercepts_ = self.calibration_ = None  # one hand-over model (gossip only)
            self.coefs_, self.coef_, self.intercept_ = res.coefs, res.coef, res.intercept
            self._margin_clip, self.handed_over_ = res.margin_clip, res.handed_over
            self.dp_base_rate_, self.comparison_ = res.dp_base_rate, res.comparison
            if res.handed_over is not None:
                self.comparison_threshold_ = res.comparison_threshold
            self.converged_, self.path_, self.schedules_ = res.converged, res.path, res.schedules
        self.graph_, self.node_sizes_, self.degrees_ = nodes.graph, res.node_sizes, res.degrees
        self.n_iter_, self.noise_source_, self.n_features_in_ = res.rounds, res.noise_source, Xs[0].shape[1]
        self.history_, self.privacy_ = res.history, res.report
        return self

    # ------------------------------------------------------------------ public facts of the fit (read-only)
    @property
    def row_map_(self):
        """A gossip fit's public row map ``(lo, hi, R)``: the column bounds (declared or DP) and the row clip every node
        prepared its rows with (``algorithms.gossip.mechanism.prepare``); None for M-ADMM or before fit."""
        return getattr(self, "_gossip", None)

    @property
    def range_base_rate_(self):
        """The DP base rate a gossip fit's range rounds released (None where none was released)."""
        return getattr(self, "_gossip_base_rate", None)

    @property
    def margin_clip_(self):
        """M-ADMM's public margin clip of the handed-over model (None: none applied, or before fit)."""
        return getattr(self, "_margin_clip", None)

    # ------------------------------------------------------------------ gossip
    def _use_gossip(self) -> bool:
        check_choice("protocol", self.protocol, ("auto", "admm", "gossip"))
        if self.protocol == "admm":
            if self.epsilon is not None:
                raise InvalidParameterError(f"epsilon selects the noisy-gradient gossip protocol, got epsilon={self.epsilon!r} "
                                            "with protocol='admm'; M-ADMM's privacy is set by perturbation and alpha.")
            return False
        if self.protocol == "auto" and self.epsilon is None:
            return False
        if self.perturbation != "none":
            raise InvalidParameterError(f"epsilon (noisy-gradient gossip) and perturbation={self.perturbation!r} "
                                        "([Zhang]) are two different protocols; give one of them.")
        return True

    # ------------------------------------------------------------------ predict
    def decision_function(self, X, node: int | None = None) -> np.ndarray:
        """``X f̄ + b`` with f̄ the mean of the node models (equal to each f_i at consensus) and b = 0, or the
        DP base rate's logit with f̄ = 0 when that was handed over; margins clipped to ±4 when the private
        model was handed over after the accounted comparison.

        ``node=i`` (gossip): node i's own model — its choice by cross-validation on its own rows (``node_coefs_[i]``,
        ``node_choice_[i]``: its recalibrated consensus, its own model in raw units, or its own base rate;
        :mod:`dpadmm.algorithms.gossip.choice`) when the fit recalibrated, else its consensus model ``coefs_[i]``."""
        if not hasattr(self, "coef_"):
            raise NotFittedError("this ConsensusLogisticRegression is not fitted yet; call fit first.")
        A = one_matrix(self, X, sparse=False)  # the fitted column count, or one line saying so
        gossip = getattr(self, "_gossip", None) is not None
        if node is not None:
            if not gossip:
                raise InvalidParameterError("node= picks one node's model of a gossip fit (epsilon= or "
                                            "protocol='gossip'); an M-ADMM fit hands over one model.")
            k = len(self.coefs_)
            if isinstance(node, bool) or not isinstance(node, numbers.Integral) or not 0 <= node < k:
                raise InvalidParameterError(f"node must be a node index in 0..{k - 1}, got node={node!r}.")
        if gossip:  # the fit's own column map: bounds, clip, intercept
            lo, hi, R = self._gossip
            if node is None:
                w = np.append(self.coef_, self.intercept_)
            elif getattr(self, "node_coefs_", None) is not None:
                w = np.append(self.node_coefs_[node], self.node_intercepts_[node])
                if (getattr(self, "node_spaces_", None) or [None] * (node + 1))[node] == "raw":
                    return np.nan_to_num(A) @ w[:-1] + w[-1]  # the node's own model, in raw units (choice.py)
            else:
                w = np.append(self.coefs_[node], self.intercepts_[node])
            z = gossip_mech.prepare(A, lo, hi, R) @ w
            clip = getattr(self, "_margin_clip", None) if node is None else None  # the validated model's ±L
            return z if clip is None else np.clip(z, -clip, clip)
        if self.normalize:  # the rows as the model was fitted on them (idempotent on rows of norm ≤ 1)
            A = A / np.maximum(np.linalg.norm(A, axis=1), 1.0)[:, None]
        z = A @ self.coef_ + getattr(self, "intercept_", 0.0)
        clip = getattr(self, "_margin_clip", None)
        return z if clip is None else np.clip(z, -clip, clip)

    def predict_proba(self, X, node: int | None = None) -> np.ndarray:
        """Class probabilities of :meth:`decision_function` (``node=i``: node i's own model)."""
        p = 1.0 / (1.0 + np.exp(-np.clip(self.decision_function(X, node), -500, 500)))
        return np.column_stack([1.0 - p, p])

    def predict(self, X, node: int | None = None) -> np.ndarray:
        """Classes of :meth:`decision_function` (``node=i``: node i's own model)."""
        s = self.decision_function(X, node)  # first: an unfitted model raises NotFittedError
        return self.classes_[(s > 0).astype(int)]

    def __sklearn_tags__(self):
        return binary_classifier_tags(super().__sklearn_tags__(), sparse=True)  # sparse rows are densified
