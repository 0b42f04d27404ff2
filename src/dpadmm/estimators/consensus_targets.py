"""Consensus (noisy-gradient gossip) beyond yes/no: :class:`ConsensusLinearRegression` (squared or Huber loss) and
:class:`ConsensusMultinomialClassifier` (softmax over K classes).

Thin: parameters → :class:`~dpadmm.algorithms.gossip.params.GossipParams` → the gossip driver → attributes. The
mechanisms and their proofs are :mod:`dpadmm.algorithms.gossip.targets`'s; each node's rows (features and labels)
stay with it, and record-level DP of a node's rows covers its labels (no separate label mechanism)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import NotFittedError

from .._validation import as_float_matrix, as_vector, check_int, check_random_state, noise_seed
from ..algorithms.gossip import driver as gossip_driver
from ..algorithms.gossip import mechanism as gossip_mech
from ..algorithms.gossip.params import GossipParams
from ..algorithms.gossip.schedule import DEFAULT_DELTA, DEFAULT_RIDGE
from ..algorithms.gossip.targets import unscale
from ..backends import get_backend
from ..data.graphs import Nodes, make_graph, split_indices
from ..exceptions import InvalidDataError, InvalidParameterError
from ._sklearn import checked_classes, declared_labels, is_block_list, one_matrix, target


class _GossipTargetEstimator(BaseEstimator):
    """What the two estimators share: the node data, the gossip fit and the fitted column map."""

    _loss_name = "logistic"

    def _labels(self, y, n: int | None = None) -> np.ndarray:  # pragma: no cover - each subclass defines it
        raise NotImplementedError

    def _node_data(self, X, y, seed: np.random.SeedSequence):
        if is_block_list(X):
            if y is None or not isinstance(y, (list, tuple)) or len(y) != len(X):
                raise InvalidDataError("with a list of node datasets X, give a list y of the same length.")
            Xs = [as_float_matrix(f"X[{i}]", x) for i, x in enumerate(X)]
            if not Xs or any(x.shape[1] != Xs[0].shape[1] for x in Xs):
                raise InvalidDataError("every node's X must have the same number of features.")
            y_all = self._labels(np.concatenate([np.asarray(v).ravel() for v in y]))
            sizes = np.cumsum([0] + [x.shape[0] for x in Xs])
            if y_all.shape[0] != sizes[-1]:
                raise InvalidDataError("every node's y must have one label per row of its X.")
            return Xs, [y_all[a:b] for a, b in zip(sizes[:-1], sizes[1:])]
        A = one_matrix(self, X, sparse=False)
        y_all = self._labels(y, A.shape[0])
        n = check_int("n_nodes", self.n_nodes, minimum=2)
        if A.shape[0] < n:
            raise InvalidDataError(f"X has n_samples={A.shape[0]} for {n} nodes; give at least one row per node.")
        rng = np.random.default_rng(np.random.SeedSequence(seed.entropy, spawn_key=(2**20,)))
        idx = split_indices(A.shape[0], n, self.split, ratio=float(self.uneven_ratio), random_state=rng)
        return [A[i] for i in idx], [y_all[i] for i in idx]

    def _gossip_fit(self, params: GossipParams, X, y, callbacks: Sequence):
        self.__dict__.pop("n_features_in_", None)  # a refit is a new fit: any column count
        seed = check_random_state(self.random_state)
        Xs, ys = self._node_data(X, y, seed)
        graph_rng = np.random.default_rng(np.random.SeedSequence(seed.entropy, spawn_key=(2**21,)))
        nodes = Nodes(Xs, ys, make_graph(self.topology, len(Xs), random_state=graph_rng))
        res = gossip_driver.fit(params, nodes, get_backend(self.backend), callbacks=callbacks,
                                noise_seed=noise_seed(self.random_state))
        self._map = (res.lo, res.hi, res.row_clip)
        self.coefs_ = res.F  # (N, K(d + 1)) each node's model on the prepared rows, intercept last
        self.column_bounds_, self.bounds_source_ = np.column_stack([res.lo, res.hi]), res.bounds_source
        self.noise_multiplier_, self.regime_, self.momentum_ = res.noise_multiplier, res.regime, res.momentum
        self.rounds_ = 0 if res.path is None else int(len(res.path))
        self.n_iter_, self.noise_source_, self.n_features_in_ = res.rounds, res.noise_source, Xs[0].shape[1]
        self.graph_, self.node_sizes_, self.degrees_ = nodes.graph, res.node_sizes, res.degrees
        self.history_, self.privacy_ = res.history, res.report
        return res

    def _scores(self, X, node: int | None, outputs: int) -> np.ndarray:
        """Prepared rows times the (mean, or node ``node``'s) model: (n,) or (n, K)."""
        if not hasattr(self, "coefs_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit first.")
        A = one_matrix(self, X, sparse=False)
        F = self.coefs_.mean(axis=0) if node is None else self.coefs_[int(node)]
        Xt = gossip_mech.prepare(A, *self._map)
        return Xt @ F if outputs == 1 else Xt @ F.reshape(outputs, -1).T

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # sparse rows are densified (one_matrix)
        return tags

    def _common(self) -> dict:
        return dict(epsilon=self.epsilon, delta=self.delta, rounds=self.rounds, bounds=self.bounds,
                    row_clip=self.row_clip, ridge=self.ridge, monitor=self.monitor)


class ConsensusLinearRegression(RegressorMixin, _GossipTargetEstimator):
    """Linear regression learned by N nodes of a graph with noisy-gradient gossip (record-level (ε, δ)-DP per node
    with ``epsilon``; the same protocol without noise otherwise).

    Parameters
    ----------
    epsilon, delta : each node's budget (None: no noise). loss : ``"squared"`` (the prediction clipped to the label
        range inside the gradient) or ``"huber"`` (``huber_delta`` δ in units of half the label range).
    target_bounds : the public label range (lo, hi); None: a DP estimate (the label is one more column of the
        DP range, paid from ``epsilon``). Labels are clipped to it, and so are predictions.
    n_nodes, topology, split, uneven_ratio, random_state, backend : the network and how fit(X, y) spreads rows, as
        :class:`~dpadmm.estimators.consensus.ConsensusLogisticRegression`; X may be a list of node matrices.
    rounds, bounds, row_clip, ridge, monitor : the gossip parameters (:class:`~dpadmm.algorithms.gossip.params.
        GossipParams`).

    Attributes: ``coef_``, ``intercept_`` (raw units), ``coefs_`` (each node's model on the prepared rows),
    ``target_bounds_``, ``privacy_``, ``history_``, ``column_bounds_``, ``regime_``, ``n_iter_``.
    """

    def __init__(self, *, epsilon: float | None = None, delta: float = DEFAULT_DELTA, loss: str = "squared",
                 huber_delta: float = 1.0, target_bounds: Any = None, n_nodes: int = 5, topology: Any = "ring",
                 split: str = "even", uneven_ratio: float = 10.0, rounds: int | None = None, bounds: Any = None,
                 row_clip: float | None = None, ridge: float = DEFAULT_RIDGE, random_state: Any = None,
                 backend: Any = "inprocess", monitor: bool | None = None):
        self.epsilon, self.delta, self.loss, self.huber_delta = epsilon, delta, loss, huber_delta
        self.target_bounds, self.n_nodes, self.topology, self.split = target_bounds, n_nodes, topology, split
        self.uneven_ratio, self.rounds, self.bounds, self.row_clip = uneven_ratio, rounds, bounds, row_clip
        self.ridge, self.random_state, self.backend, self.monitor = ridge, random_state, backend, monitor

    def _labels(self, y, n: int | None = None) -> np.ndarray:
        return as_vector("y", target(y, classes=False), n)  # NaN or infinite labels refused with one line

    def fit(self, X, y=None, *, callbacks: Sequence = ()):
        if self.loss not in ("squared", "huber"):
            raise InvalidParameterError(f"loss must be 'squared' or 'huber' for ConsensusLinearRegression, got "
                                        f"loss={self.loss!r}.")
        params = GossipParams(**self._common(), loss=self.loss, huber_delta=self.huber_delta,
                              target_bounds=self.target_bounds)
        res = self._gossip_fit(params, X, y, callbacks)
        self.target_bounds_ = res.target_bounds
        lo, hi, R = self._map
        w = res.F.mean(axis=0)
        # raw units where no clip acts: y = lo_y + (u + 1)(hi_y − lo_y)/2 with z = 2(x − lo)/(hi − lo) − 1
        half = 0.5 * (self.target_bounds_[1] - self.target_bounds_[0])
        self.coef_ = half * 2.0 * w[:-1] / (hi - lo)
        self.intercept_ = float(self.target_bounds_[0] + half * (1.0 + w[-1] - w[:-1] @ (1.0 + 2.0 * lo / (hi - lo))))
        return self

    def predict(self, X, node: int | None = None) -> np.ndarray:
        """The consensus model's predictions in the label's units, clipped to the label range (``node=i``: node i's
        own broadcast mean)."""
        u = self._scores(X, node, 1)
        return unscale(np.clip(u, -1.0, 1.0), *self.target_bounds_)


class ConsensusMultinomialClassifier(ClassifierMixin, _GossipTargetEstimator):
    """Multinomial (softmax) logistic regression over K ≥ 2 classes learned by N nodes of a graph with noisy-gradient
    gossip: one release per round of the stacked K(d + 1) gradient sum, Δ = 2√2·√(R² + 1) (:mod:`dpadmm.algorithms.
    gossip.targets`), so K classes cost what one binary model costs. Parameters as
    :class:`ConsensusLinearRegression` (no label range: the labels are class indices).

    ``classes``: the class labels, declared (required with ``epsilon``). The model's K is part of what a private fit
    releases, so it must not be read off the exact labels (one record with a new label would add a row of
    coefficients: red team 2026-11-29, T1); a label outside the declared classes counts as no class, with the same
    sensitivity. Without ``epsilon`` the classes default to those seen in ``y``.

    Attributes: ``classes_``, ``coef_`` (K × d on the prepared rows), ``intercept_`` (K,), ``coefs_``, ``privacy_``.
    """

    def __init__(self, *, epsilon: float | None = None, delta: float = DEFAULT_DELTA, n_nodes: int = 5,
                 topology: Any = "ring", split: str = "even", uneven_ratio: float = 10.0, rounds: int | None = None,
                 bounds: Any = None, row_clip: float | None = None, ridge: float = DEFAULT_RIDGE,
                 random_state: Any = None, backend: Any = "inprocess", monitor: bool | None = None,
                 classes: Any = None):
        self.epsilon, self.delta, self.n_nodes, self.topology, self.split = epsilon, delta, n_nodes, topology, split
        self.uneven_ratio, self.rounds, self.bounds, self.row_clip = uneven_ratio, rounds, bounds, row_clip
        self.ridge, self.random_state, self.backend, self.monitor = ridge, random_state, backend, monitor
        self.classes = classes

    def _labels(self, y, n: int | None = None) -> np.ndarray:
        arr = target(y, classes=self.classes is None or self.epsilon is None)  # private, declared: no label type check
        if n is not None and arr.shape[0] != n:
            raise InvalidDataError(f"y has {arr.shape[0]} entries but X has {n} rows; they must match.")
        if self.classes is None:
            self.classes_, idx = np.unique(arr, return_inverse=True)
        else:
            idx = declared_labels(self.classes_, arr, private=self.epsilon is not None)  # outside: K, no class
        if len(self.classes_) < 2:
            raise InvalidDataError(f"y has {len(self.classes_)} class; a classifier needs labels of at least two "
                                   "classes.")
        return idx.astype(np.float64)

    def fit(self, X, y=None, *, callbacks: Sequence = ()):
        self.classes_ = None
        if self.classes is not None:
            self.classes_ = checked_classes(self.classes)
        elif self.epsilon is not None:
            raise InvalidParameterError("a private fit's classes are part of what it releases: give classes=[...] "
                                        "(the classes seen in the exact labels would depend on them).")
        if is_block_list(X) and isinstance(y, (list, tuple)):  # the classes of every node's labels together
            self._labels(np.concatenate([np.asarray(v).ravel() for v in y]))
        elif y is not None:
            self._labels(y)
        K = 2 if self.classes_ is None else len(self.classes_)
        res = self._gossip_fit(GossipParams(**self._common(), loss="multinomial", classes=K), X, y, callbacks)
        W = res.F.mean(axis=0).reshape(K, -1)
        self.coef_, self.intercept_ = W[:, :-1].copy(), W[:, -1].copy()
        return self

    def _margins(self, X, node: int | None) -> np.ndarray:
        if not hasattr(self, "coefs_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit first.")
        return self._scores(X, node, len(self.classes_))

    def decision_function(self, X, node: int | None = None) -> np.ndarray:
        """(n, K) class scores; with two classes scikit-learn's (n,) score of the second (its margin over the first)."""
        M = self._margins(X, node)
        return M[:, 1] - M[:, 0] if M.shape[1] == 2 else M

    def predict_proba(self, X, node: int | None = None) -> np.ndarray:
        M = self._margins(X, node)
        M = np.exp(M - M.max(axis=1, keepdims=True))
        return M / M.sum(axis=1, keepdims=True)

    def predict(self, X, node: int | None = None) -> np.ndarray:
        k = np.argmax(self._margins(X, node), axis=1)
        return self.classes_[k]


__all__ = ["ConsensusLinearRegression", "ConsensusMultinomialClassifier"]
