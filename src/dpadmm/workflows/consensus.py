"""The consensus job: R runs of decentralised M-ADMM with penalty perturbation [Zhang, §5] in the metrics.json
layout of ``dpadmm consensus madmm``, and its data (Adult or a LIBSVM file).

Choices the paper leaves open (docs/algorithms.md §2) — documented and exposed as options:

- **C = 50, ρ (reg_weight) = 1.** With the paper's objective ``(C/B_i) Σ ℒ + (ρ/N)·½‖f‖²`` this is
  per-sample logistic regression with λ = ρ/(N·C) on average (C ≤ B_i holds for every setting
  here). C scales P(t) linearly; C = 50 keeps P(T) of the paper's schedules in single or double
  digits while the non-private optimum still has a meaningful loss (L* ≈ 0.424 on Adult).
- **Graphs:** Fig. 1–2 and the attack: a 5-node ring; Fig. 3–4: 100 nodes, connected
  Erdős–Rényi G(100, 0.1) drawn from the seed.
- **Uneven split:** node sizes ∝ linspace(1, 10, N) (largest node 10× the smallest).
- **Runs:** "independent runs" redraw the noise only; the data split and the graph are fixed.
- f_i(0) = 0 (data independent), λ_i(0) = 0.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from ..privacy.ledger import nonprivate_privacy, not_protected

from ..data.adult import load_adult
from ..data import load_libsvm
from .._validation import binary_labels
from ..data.graphs import split_indices
from ..backends import get_backend
from ..data.graphs import make_graph
from ..estimators.consensus import ConsensusLogisticRegression
from ..algorithms.consensus.params import solve_alpha
from ..data.graphs import adjacency

PAPER_C = 50.0
PAPER_REG_WEIGHT = 1.0
THETA = 0.5


# ----------------------------------------------------------------------------- data
def load_data(data: str = "adult", *, samples: int = 0, seed: int = 0):
    """Adult (bundled, [Zhang, §5]) or a LIBSVM file; optionally a random subset of ``samples`` rows."""
    if data == "adult":
        X, y = load_adult()
    else:
        X, y = load_libsvm(data)
        X = np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=np.float64)
    if samples and samples < len(y):
        idx = np.sort(np.random.default_rng(seed).choice(len(y), samples, replace=False))
        X, y = X[idx], y[idx]
    return X, y


def _node_data(X, y, nodes: int, split: str, ratio: float, seed: int, private: bool = False):
    y_pm, _ = binary_labels("labels", y, private=private)  # private: the declared domain, no class counted (T3)
    idx = split_indices(len(y_pm), nodes, split, ratio=ratio, random_state=np.random.default_rng([seed, 1]))
    return [X[i] for i in idx], [y_pm[i] for i in idx]


# ----------------------------------------------------------------------------- one configuration, R runs
def released_curves(model, Xs, ys) -> dict:
    """L(t), the objective, accuracy and consensus error per round, from the released path f_i(t) [Zhang, §5].

    Post-processing of what every node broadcasts, evaluated on node data the caller holds (a
    simulation); ``Xs`` must be the node datasets the model was fitted on (rows rescaled as in fit).
    """
    P = model.path_  # (T, N, d)
    if model.normalize:
        Xs = [x / np.maximum(np.linalg.norm(x, axis=1), 1.0)[:, None] for x in Xs]
    N = P.shape[1]
    ypm = [np.where(np.asarray(v) == model.classes_[1], 1.0, -1.0) for v in ys]
    loss = np.empty((P.shape[0], N))
    correct = np.zeros(P.shape[0])
    for i in range(N):  # one (B_i × T) product per node
        Z = np.asarray(Xs[i], dtype=np.float64) @ P[:, i, :].T
        loss[:, i] = np.logaddexp(0.0, -ypm[i][:, None] * Z).mean(axis=0)
        correct += (np.where(Z >= 0, 1.0, -1.0) == ypm[i][:, None]).sum(axis=0)
    reg = float(model.reg_weight) / N
    obj = (float(model.C) * loss + 0.5 * reg * (P ** 2).sum(axis=2)).sum(axis=1)
    cons = np.max(np.linalg.norm(P - P.mean(axis=1, keepdims=True), axis=2), axis=1)
    return {"train_loss": loss.mean(axis=1).tolist(), "objective": obj.tolist(),
            "train_accuracy": (correct / sum(len(v) for v in ys)).tolist(), "consensus_error": cons.tolist()}



def _log_loss(model, X, y_pm) -> float:
    """Mean log loss of the handed-over model on (X, y ∈ ±1)."""
    z = model.decision_function(X)
    return float(np.mean(np.logaddexp(0.0, -np.where(np.asarray(y_pm) > 0, 1.0, -1.0) * z)))


def _base_rate_loss_on(ys, y_eval) -> float:
    """Log loss on ``y_eval`` (±1) of predicting the pooled training base rate."""
    p = float(np.mean(np.concatenate([np.asarray(v) for v in ys]) > 0))
    p = min(max(p, 1e-12), 1 - 1e-12)
    ye = np.asarray(y_eval) > 0
    return float(-np.mean(np.where(ye, np.log(p), np.log1p(-p))))


def _base_rate_loss(ys) -> float:
    """Average log loss of predicting the pooled base rate for every record (the trivial model)."""
    p = float(np.mean(np.concatenate([np.asarray(v) for v in ys]) > 0))
    p = min(max(p, 1e-12), 1 - 1e-12)
    return float(-(p * np.log(p) + (1 - p) * np.log1p(-p)))


def run_consensus(*, data: str = "adult", X=None, y=None, nodes: int = 5, topology: Any = "ring", split: str = "even",
                  uneven_ratio: float = 10.0, perturbation: str = "none", C: float = PAPER_C,
                  reg_weight: float = PAPER_REG_WEIGHT, iterations: int = 100, runs: int = 1, seed: int | None = 0,
                  normalize: bool = False, monitor: bool | None = None, progress: Callable | None = None, eta=None, eta_growth=1.0, alpha=None,
                  alpha_growth=1.0, theta=THETA, theta_growth=1.0, samples: int = 0, backend: str = "inprocess",
                  backend_options: dict | None = None, X_test=None, y_test=None,
                  fallback_epsilon: float | None = None, epsilon: float | None = None,
                  training_metrics: bool | None = None) -> dict:
    """Fit R independent runs of one configuration; return the metrics.json layout:
    ``history.train_loss.{mean,min,max}`` (L(t) over runs), ``history.privacy_bound`` (P(t)), ``final``, ``config``.

    ``seed=None``: every node draws its noise from its own OS entropy (data split and graph use seed 0).
    ``X_test``/``y_test``: held-out rows; ``final.test_loss_*`` is the log loss of the model each run hands
    over (the consensus model or, private with a fallback, the DP base rate) and ``final.test_base_rate_loss``
    that of predicting the training base rate. ``metrics["_model"]`` holds the last run's model arrays.
    ``epsilon`` (pp/dvp): the total per-node budget; α(1) is solved for (``algorithms.consensus.params.solve_alpha``)
    so that P(T) + ``fallback_epsilon`` = epsilon.
    ``monitor=None``: the nodes report their training loss every round only in non-private runs; otherwise
    L(t) is evaluated here, by the simulation driver, from the *released* models f_i(t) (what the
    adversary sees anyway) on the node data this driver loaded — nothing un-noised leaves a node.
    ``training_metrics``: keep L(t), the objective, the training accuracy and the handed-over model's training loss
    (un-noised functions of the training rows: exact counts, e.g. ``train_accuracy × n``). None: only in a
    non-private run or with ``monitor=True`` (``--monitor``, labelled as monitoring outside the guarantee); the
    paper reproductions pass True (their figures are L(t); labelled the same way)."""

    data_seed = 0 if seed is None else seed
    private = perturbation != "none"
    training = (not private or monitor is True) if training_metrics is None else bool(training_metrics)
    monitor = (not private) if monitor is None else bool(monitor)
    if X is None:
        X, y = load_data(data, samples=samples, seed=data_seed)
    Xs, ys = _node_data(X, y, nodes, split, uneven_ratio, data_seed, private)
    G = make_graph(topology, nodes, random_state=np.random.default_rng([data_seed, 2]))
    curves, consensus, objective, accuracy, secs, sec_curves = [], [], [], [], [], []
    test_losses, handed, dp_rates, train_handed = [], [], [], []
    if X_test is not None:
        X_test = np.asarray(X_test.toarray() if hasattr(X_test, "toarray") else X_test, dtype=np.float64)
        if normalize:
            X_test = X_test / np.maximum(np.linalg.norm(X_test, axis=1), 1.0)[:, None]
        y_test_pm, _ = binary_labels("test labels", y_test, private=private)
    model = None
    placement = None  # Ray: where every node's actor ran (config.placement)
    if epsilon is not None and perturbation in ("pp", "dvp"):  # α(1) for the budget: the folder's ε → α
        alpha = solve_alpha(epsilon, fallback_epsilon=fallback_epsilon, C=C, theta=theta, theta_growth=theta_growth,
                            eta=eta, eta_growth=eta_growth, perturbation=perturbation, alpha_growth=alpha_growth,
                            sizes=[len(v) for v in ys], degree=adjacency(G)[1], rounds=iterations)
    t0 = time.perf_counter()
    for r in range(runs):
        cb = [] if progress is None else [lambda t, rec, r=r: progress(r * iterations + t, rec)]
        model = ConsensusLogisticRegression(
            C=C, reg_weight=reg_weight, n_nodes=nodes, topology=G, theta=theta, theta_growth=theta_growth, eta=eta,
            eta_growth=eta_growth, perturbation=perturbation, alpha=alpha, alpha_growth=alpha_growth,
            max_iter=iterations, normalize=normalize, batch=backend == "inprocess", fallback_epsilon=fallback_epsilon,
            backend=(be := get_backend(backend, **(backend_options or {}))), monitor=monitor, record_path=not monitor,
            random_state=None if seed is None else int(np.random.SeedSequence([seed, r]).generate_state(1)[0]))
        model.fit(Xs, ys, callbacks=cb)
        placement = getattr(be, "placement_", None) or placement
        h = model.history_ if monitor else dict(model.history_, **released_curves(model, Xs, ys))
        curves.append(h["train_loss"])
        consensus.append(h["consensus_error"][-1])
        objective.append(h["objective"][-1])
        accuracy.append(h["train_accuracy"][-1])
        secs.append(h["seconds"][-1])
        sec_curves.append(model.history_["seconds"])
        handed.append(model.handed_over_ or "model")
        dp_rates.append(model.dp_base_rate_)
        # a private run's DP base rate p on the training labels: −(k/n) log p − (1 − k/n) log(1 − p) inverts to the
        # exact positive count k (issue 35); only a handed-over model's loss is kept, as train_loss is
        train_handed.append(math.nan if private and model.handed_over_ == "dp-base-rate" else
                            _log_loss(model, np.concatenate(Xs), np.concatenate(ys)))
        if X_test is not None:
            test_losses.append(_log_loss(model, X_test, y_test_pm))
    L = np.asarray(curves)
    pb = model.history_["privacy_bound"]
    final_pb = pb[-1] if np.isfinite(pb[-1]) else None
    sizes = model.node_sizes_
    # a private run keeps no un-noised function of the training rows (issue 35) unless asked (``training``)
    train_history = {"train_loss": {"mean": L.mean(axis=0).tolist(), "min": L.min(axis=0).tolist(),
                                    "max": L.max(axis=0).tolist()}} if training else {}
    train_final = {
        "train_loss_mean": float(L[:, -1].mean()), "train_loss_min": float(L[:, -1].min()),
        "train_loss_max": float(L[:, -1].max()), "train_loss_range": float(np.ptp(L[:, -1])),
        "objective_mean": float(np.mean(objective)), "train_accuracy_mean": float(np.mean(accuracy)),
        "handed_over_train_loss_mean": (float(np.nanmean(train_handed)) if not np.all(np.isnan(train_handed))
                                        else None)} if training else {}
    return {
        "history": {
            **train_history,
            "privacy_bound": [v if np.isfinite(v) else None for v in pb],
            "iteration": list(range(1, L.shape[1] + 1)),
            # training seconds after each round (steps + routing; monitoring excluded), mean over runs
            "seconds": np.mean([c[:L.shape[1]] for c in sec_curves], axis=0).tolist(),
        },
        "final": {
            **train_final,
            # a private run keeps no exact training count (issue 35): no training base rate, and the test baseline
            # is the test set's own base rate (local evaluation on the evaluator's rows)
            "base_rate_train_loss": None if private else _base_rate_loss(ys),
            "privacy_bound": final_pb, "consensus_error_mean": float(np.mean(consensus)),
            "iterations": int(L.shape[1]), "runs": int(runs), "train_seconds_per_run": float(np.mean(secs)),
            "wall_seconds": time.perf_counter() - t0,
            "privacy_per_node": model.privacy_.per_party if model.privacy_ is not None else None,
            "handed_over": handed, "dp_base_rate": dp_rates,
            **({"test_loss_mean": float(np.mean(test_losses)), "test_loss_min": float(np.min(test_losses)),
                "test_loss_max": float(np.max(test_losses)), "test_loss": test_losses,
                "test_base_rate_loss": _base_rate_loss_on([y_test_pm] if private else ys, y_test_pm),
                "test_base_rate_source": "test-set" if private else "training-labels", "n_test": int(len(y_test_pm))}
               if X_test is not None else {}),
            "evaluated_by": ("the nodes (monitoring)" if monitor else
                             "the simulation driver, from the released models f_i(t) (no monitoring)") + (
                "; the training loss and accuracy are un-noised functions of the training rows, outside the "
                "guarantee (monitoring)" if private and training else ""),
        },
        "privacy": (dict(model.privacy_.to_dict(), private=True) if model.privacy_ is not None else
                    nonprivate_privacy({"records": not_protected(
                        "records", "non-private run: every node broadcasts its model f_i(t) without noise")},
                        note="non-private run: epsilon is infinite")),
        "config": {
            "data": data, "n_samples": int(sum(len(v) for v in ys)), "n_features": int(Xs[0].shape[1]),
            "backend": backend, **({"placement": placement} if placement else {}), "nodes": nodes, "topology": str(topology) if not hasattr(topology, "nodes") else "networkx graph",
            "edges": int(G.number_of_edges()), "split": split, "uneven_ratio": uneven_ratio,
            "node_size_min": int(sizes.min()), "node_size_max": int(sizes.max()),
            "degree_min": int(model.degrees_.min()), "degree_max": int(model.degrees_.max()),
            "perturbation": perturbation, "C": C, "reg_weight": reg_weight, "theta": theta, "theta_growth": theta_growth,
            "eta": eta if eta is not None else "theta", "eta_growth": eta_growth, "alpha": alpha,
            "alpha_growth": alpha_growth, "iterations": iterations, "runs": runs, "seed": seed, "normalize": normalize,
            "monitor": monitor, "noise_source": model.noise_source_,
            "c1": 0.25, "regularizer": "R(f) = 1/2 ||f||^2", "loss": "logistic", "init": "f_i(0) = 0, lambda_i(0) = 0",
            "fallback_epsilon": fallback_epsilon if private else None, "epsilon_target": epsilon,
        },
        "_model": {"coef": model.coef_, "intercept": np.float64(model.intercept_), "coefs": model.coefs_,
                   "classes": np.asarray(model.classes_), "handed_over": np.str_(model.handed_over_ or "model"),
                   "margin_clip": np.float64(model.margin_clip_ if model.margin_clip_ is not None else np.inf)},
    }
