"""Labels-only vertical learning with several classes: the label party's one k-ary randomized-response release and
its multinomial recalibration on its exact labels (beyond [Hu], which is binary).

Protocol (three steps, one release; :class:`dpadmm.estimators.label_classification.LabelPrivateVerticalClassifier`):

1. **Release.** The label party (party 1) releases ``ỹ = k-RR(y)`` once at ``label_epsilon``
   (:func:`release_class_labels`, by :func:`dpadmm.privacy.label_mechanisms.k_randomized_response`: each label kept
   with probability ``e^ε/(e^ε + K − 1)``, else one of the other K − 1 classes uniformly). Relation: one training
   label changes (:data:`~dpadmm.privacy.events.LABEL_CHANGE`); pure ε, δ = 0 — the proof is in
   :mod:`dpadmm.privacy.label_mechanisms` (every output ratio lies in ``[e^−ε, e^ε]``; nothing else needs
   enforcing than the labels lying in the K public classes, which the release checks). The class list is the label
   party's public schema (as the two names of a binary label are): it is not priced.
2. **Joint fits, one-vs-rest.** For each class k (one fit for K = 2) the unchanged non-private ADMM sharing fits the
   logistic loss to ``1[ỹ = k]`` (:class:`~dpadmm.estimators.vertical.VerticalLogisticRegression`). Every message of
   those runs is a function of ỹ and the parties' features only, so — whatever the coordinator or a peer does with
   them — they are post-processing of step 1 and cost no label budget, however many rounds or classes run.
   The features are not protected (labels-only protocol).
3. **Recalibration** (:func:`refit_multiclass_label_block`, at the label party only): on its *exact* labels the
   label party fits a multinomial model of its own block, K intercepts and one weight ``α_k`` per class on the sum
   ``o_k`` of the others' last shares of fit k, and keeps it or its own multinomial model (its block alone),
   whichever cross-validates better on its own rows — the same rule as the binary refit
   (:func:`dpadmm.algorithms.vertical.label.refit_label_block`: :data:`~.label.FOLDS` folds, the joint model must
   win by :data:`~.label.MARGIN` standard errors). The weights undo the shrinkage of fitting randomized-response
   labels (``P(ỹ = k | x)`` is an affine, shrunk function of ``P(y = k | x)``) on the exact labels; α → 0 recovers
   the label party alone. The result uses only the label party's data and the shares it already holds: it costs no
   privacy, stays with the label party and is not covered by the label ε (it is the label party's own model).

Scores: ``s_ik = d_iᵀx_k + b_k + α_k o_ik``; objective ``mean_i CE(softmax(s_i), y_i) + λ/2 Σ_k ‖x_k‖²`` (b and α
unpenalised), minimised by L-BFGS with the exact gradient (no loop over samples; folds are five vectorised fits).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize
from scipy.special import log_softmax

from ...privacy.label_mechanisms import k_randomized_response
from ..._validation import noise_seed
from .label import FOLDS, MARGIN

#: the label party's stream tag (as the regression release's): its generator is ``[seed, RELEASE_STREAM]``
RELEASE_STREAM = 0x4C52


def release_class_labels(y_index: np.ndarray, n_classes: int, label_epsilon: float, *, random_state=None):
    """Step 1 (module docstring): the label party's one k-ary randomized-response release of class indices
    ``0 … K−1``, from its own generator (OS entropy unless ``random_state`` seeds a simulation). Returns
    ``(ỹ, [PureDPRelease("party1", 0, ε, LABEL_CHANGE)])``."""
    seed = noise_seed(random_state)
    rng = np.random.default_rng(None if seed is None else [seed, RELEASE_STREAM])
    return k_randomized_response(y_index, int(n_classes), float(label_epsilon), rng=rng, party="party1")


def _unpack(w: np.ndarray, d: int, K: int, weigh: bool):
    X = w[:d * K].reshape(d, K)
    b = w[d * K:d * K + K]
    alpha = w[d * K + K:] if weigh else np.zeros(K)
    return X, b, alpha


def multinomial_fit(D, offsets: np.ndarray | None, y: np.ndarray, K: int, lam: float, rows=None,
                    w0: np.ndarray | None = None) -> np.ndarray:
    """``argmin`` of the module docstring's objective over ``rows`` (all by default): parameters ``[vec(X), b, α]``
    (α only with ``offsets``, an (N, K) array). ``D``: the label party's (N, d) block (dense or CSR)."""
    n_all, d = D.shape
    weigh = offsets is not None
    rows = np.arange(n_all) if rows is None else rows
    Dr = D[rows]
    Or = offsets[rows] if weigh else None
    Y = np.zeros((rows.size, K))
    Y[np.arange(rows.size), y[rows]] = 1.0
    n = float(rows.size)

    def f(w):
        X, b, alpha = _unpack(w, d, K, weigh)
        S = np.asarray(Dr @ X) + b + (Or * alpha if weigh else 0.0)
        L = log_softmax(S, axis=1)
        G = (np.exp(L) - Y) / n  # (rows, K): d mean CE / d S
        val = -float(np.sum(L * Y)) / n + 0.5 * lam * float(np.sum(X * X))
        grad = [np.asarray(Dr.T @ G).ravel() + lam * X.ravel(), G.sum(axis=0)]
        if weigh:
            grad.append(np.sum(G * Or, axis=0))
        return val, np.concatenate(grad)

    k = d * K + K + (K if weigh else 0)
    w = np.zeros(k) if w0 is None else np.asarray(w0, dtype=np.float64).copy()
    return minimize(f, w, jac=True, method="L-BFGS-B", options={"maxiter": 2000, "gtol": 1e-9, "ftol": 1e-13}).x


def _scores(D, offsets, w, K, weigh):
    X, b, alpha = _unpack(w, D.shape[1], K, weigh)
    return np.asarray(D @ X) + b + (offsets * alpha if weigh else 0.0)


def _row_loss(S: np.ndarray, y: np.ndarray) -> np.ndarray:
    return -log_softmax(S, axis=1)[np.arange(y.size), y]


def refit_multiclass_label_block(D, y: np.ndarray, offsets: np.ndarray, K: int, lam: float, *,
                                 choose: bool = True) -> dict:
    """Step 3 (module docstring): the label party's multinomial refit on its exact labels ``y`` (indices) with one
    weight per class on ``offsets`` (N, K) = the others' summed shares of each one-vs-rest fit, and — with
    ``choose`` — its cross-validated choice against its own multinomial model. Returns ``coef`` (d, K),
    ``intercept`` (K,), ``passive_weight`` α (K,; zeros when it keeps its own), ``choice`` and ``cv``."""
    n, d = D.shape
    y = np.asarray(y, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.float64).reshape(n, K)
    w = multinomial_fit(D, offsets, y, K, lam)
    X, b, alpha = _unpack(w, d, K, True)
    out = {"coef": X, "intercept": b, "passive_weight": alpha, "choice": "joint", "cv": None}
    if not choose:
        return out
    w_alone = multinomial_fit(D, None, y, K, lam)
    fold = np.arange(n) % FOLDS
    held = []  # per-row held-out loss of the joint model, then of the label party's own
    for offs, w_full in ((offsets, w), (None, w_alone)):
        loss = np.empty(n)
        for k in range(FOLDS):  # each fold starts at the full fit
            w_k = multinomial_fit(D, offs, y, K, lam, rows=np.flatnonzero(fold != k), w0=w_full)
            te = np.flatnonzero(fold == k)
            loss[te] = _row_loss(_scores(D[te], None if offs is None else offs[te], w_k, K, offs is not None), y[te])
        held.append(loss)
    lj, la = held
    diff = lj - la
    cv = {"joint": float(lj.mean()), "alone": float(la.mean()),
          "standard_error": float(diff.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0}
    out["cv"] = cv
    if cv["joint"] + MARGIN * cv["standard_error"] >= cv["alone"]:
        Xa, ba, _ = _unpack(w_alone, d, K, False)
        out.update(coef=Xa, intercept=ba, passive_weight=np.zeros(K), choice="alone")
    return out


__all__ = ["RELEASE_STREAM", "multinomial_fit", "refit_multiclass_label_block", "release_class_labels"]
