"""``dpadmm consensus gossip``: R runs of noisy-gradient gossip, in the metrics.json layout of
:func:`dpadmm.workflows.consensus.run_consensus` (plus ``test_log_loss``, the key ``dpadmm vertical`` uses)."""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from .._validation import binary_labels
from ..algorithms.gossip import mechanism as mech
from ..backends import get_backend
from ..data.graphs import make_graph
from ..estimators.consensus import ConsensusLogisticRegression
from ..exceptions import InvalidParameterError
from ..privacy.ledger import nonprivate_privacy, not_protected
from .consensus import _base_rate_loss, _base_rate_loss_on, _node_data


LOSS_ROWS = 8192  # rows per block of the training-loss curve (:func:`_losses`): a block × rounds matrix at most


def _losses(path: np.ndarray, Xs, ys, lo, hi, R) -> list[float]:
    """L(t): the mean training log loss of the mean broadcast model after every round (evaluated by the driver),
    streamed: each node's rows prepared and scored :data:`LOSS_ROWS` at a time against every round's model, the
    per-round sums added up — never a rows × rounds matrix nor a second copy of the prepared rows."""
    P = np.ascontiguousarray(np.asarray(path, dtype=np.float64).T)  # (d + 1, T)
    total, n = np.zeros(P.shape[1]), 0
    for X, y in zip(Xs, ys):
        y = np.asarray(y, dtype=np.float64)
        for a in range(0, len(y), LOSS_ROWS):
            Z = mech.prepare(X[a:a + LOSS_ROWS], lo, hi, R) @ P  # (block, T)
            Z *= -y[a:a + LOSS_ROWS, None]
            np.logaddexp(0.0, Z, out=Z)
            total += Z.sum(axis=0)
            n += len(Z)
    return (total / max(n, 1)).tolist()


def _rate_loss_on(p: float, y_eval) -> float:
    """Log loss on ``y_eval`` (±1) of predicting the rate ``p`` for every row."""
    p = min(max(float(p), 1e-12), 1 - 1e-12)
    return float(-np.mean(np.where(np.asarray(y_eval) > 0, math.log(p), math.log1p(-p))))


def run_gossip(*, data: str, X, y, nodes: int = 5, topology: Any = "ring", split: str = "even",
               uneven_ratio: float = 10.0, epsilon: float | None = 1.0, delta: float = 1e-5, rounds: int | None = None,
               runs: int = 1, seed: int | None = None, bounds=None, row_clip: float | None = None,
               backend: str = "inprocess", backend_options: dict | None = None, monitor: bool | None = None,
               X_test=None, y_test=None, progress: Callable | None = None, fit_kwargs: dict | None = None,
               node_data=None) -> dict:
    """``node_data``: ``(Xs, ys, node_tests)`` — the user's nodes as given (one dataset per node, raw labels of two
    classes) and, or None, each node's own test ``(X, y)``, on which its own model is then judged (local
    evaluation); otherwise ``X``/``y`` are split at random into ``nodes`` (``split``)."""
    data_seed = 0 if seed is None else seed
    node_tests = None
    private = epsilon is not None  # a private run maps its labels against the declared domain, never counting (T3)
    if node_data is not None and node_data[1] is None:  # each node reads its own file (grpc): references only
        Xs, ys, split, nodes = list(node_data[0]), None, "as given (each node's own file)", len(node_data[0])
        if monitor:
            raise InvalidParameterError("--monitor evaluates the training loss on the nodes' rows, which stay at the "
                                        "nodes here: drop --monitor.")
    elif node_data is not None:
        Xs, raw, node_tests = node_data
        y_all, classes = binary_labels("labels", np.concatenate([np.asarray(v).ravel() for v in raw]),
                                       private=private)
        cuts = np.cumsum([0] + [len(v) for v in raw])
        Xs, ys, split = list(Xs), [y_all[a:b] for a, b in zip(cuts[:-1], cuts[1:])], "as given"
        nodes = len(Xs)
        if node_tests is not None:
            node_tests = [(np.asarray(x, dtype=np.float64), np.where(np.asarray(t).ravel() == classes[1], 1.0, -1.0))
                          for x, t in node_tests]
    else:
        Xs, ys = _node_data(X, y, nodes, split, uneven_ratio, data_seed, private)
    G = make_graph(topology, nodes, random_state=np.random.default_rng([data_seed, 2]))
    y_test_pm = None
    if X_test is not None:
        X_test = np.asarray(X_test.toarray() if hasattr(X_test, "toarray") else X_test, dtype=np.float64)
        y_test_pm, _ = binary_labels("test labels", y_test, private=private)
    # a private run keeps no un-noised function of the training rows unless monitoring was asked for: no training
    # loss, no exact base rate (the nodes' labels counted) — the DP base rate where range rounds released one
    training = (not private or bool(monitor)) and ys is not None
    curves, consensus, test_losses, train_final, secs, node_losses, rates = [], [], [], [], [], [], []
    handed, checked_rates = [], []  # per run: the shared model's DP validation (algorithms.gossip.validation)
    choices = []  # per run, each node's choice (algorithms.gossip.choice): names only, its CV losses stay local
    fit_wall = fit_cpu = 0.0  # the estimator's fit alone (no loading, no evaluation), summed over the runs
    model = None
    t0 = time.perf_counter()
    done = 0  # the rounds of the runs before: the callback counts each run's range rounds too
    for r in range(runs):
        cb = [] if progress is None else [lambda t, rec, off=done: progress(off + t, rec)]
        model = ConsensusLogisticRegression(
            n_nodes=nodes, topology=G, epsilon=epsilon, protocol="gossip", delta=delta, rounds=rounds, bounds=bounds,
            row_clip=row_clip, backend=get_backend(backend, **(backend_options or {})), monitor=monitor,
            random_state=None if seed is None else int(np.random.SeedSequence([seed, r]).generate_state(1)[0]))
        w0, c0 = time.perf_counter(), time.process_time()
        model.fit(Xs, ys, callbacks=cb, **(fit_kwargs or {}))
        fit_wall, fit_cpu = fit_wall + time.perf_counter() - w0, fit_cpu + time.process_time() - c0
        done += model.n_iter_
        rounds = model.rounds_  # None: the public schedule's T (algorithms.gossip.params.plan)
        lo, hi, R = model.row_map_
        rates.append(model.range_base_rate_)
        handed.append(model.handed_over_ or "model")
        checked_rates.append(model.dp_base_rate_)
        if model.node_choice_ is not None:
            choices.append(list(model.node_choice_))
        if training:
            curves.append(_losses(model.path_, Xs, ys, lo, hi, R))
            train_final.append(curves[-1][-1])
        w = np.append(model.coefs_, model.intercepts_[:, None], axis=1)
        consensus.append(float(np.max(np.linalg.norm(w - w.mean(axis=0), axis=1))))
        secs.append(model.history_["seconds"][-1] if model.history_.get("seconds") else float("nan"))
        if X_test is not None:
            z = model.decision_function(X_test)
            test_losses.append(float(np.mean(np.logaddexp(0.0, -y_test_pm * z))))
            if model.node_coefs_ is not None:  # each node's own model (calibration.py), on its own test rows
                evals = node_tests or [(X_test, y_test_pm)] * nodes
                node_losses.append([float(np.mean(np.logaddexp(0.0, -t * model.decision_function(x, i))))
                                    for i, (x, t) in enumerate(evals)])
    rep = model.privacy_
    eps_final = float(rep.epsilon) if rep is not None else None
    dp_rates = [p for p in rates if p is not None]
    test = {}
    if X_test is not None:
        # the trivial model's test loss: the exact training base rate in a non-private run; in a private run the DP
        # base rate (released), or without one (declared bounds: no range rounds) the test set's own base rate — the
        # evaluator's local data, no training count in it
        if not private:
            base, source = _base_rate_loss_on(ys, y_test_pm), "training-labels"
        elif dp_rates:
            base, source = float(np.mean([_rate_loss_on(p, y_test_pm) for p in dp_rates])), "dp"
        else:
            base, source = _rate_loss_on(np.mean(y_test_pm > 0), y_test_pm), "test-set"
        test = {"test_log_loss": float(np.mean(test_losses)), "test_loss_mean": float(np.mean(test_losses)),
                "test_loss_min": float(np.min(test_losses)), "test_loss_max": float(np.max(test_losses)),
                "test_loss": test_losses, "test_base_rate_loss": base, "test_base_rate_source": source,
                "n_test": int(len(y_test_pm))}
        # runs whose handed-over consensus model is worse (a DP base rate handed over is the base rate, up to its noise)
        test["consensus_runs_worse_than_base_rate"] = int(sum(t > test["test_base_rate_loss"] and h == "model"
                                                              for t, h in zip(test_losses, handed)))
        if node_losses:  # what each node uses: its consensus model recalibrated on its own rows
            NL = np.asarray(node_losses)
            test.update({"node_test_log_loss": float(NL.mean()), "node_test_loss_max": float(NL.max()),
                         "node_test_loss_run_max": float(NL.mean(axis=1).max()), "node_test_loss": NL.tolist()})
    T = int(len(model.path_)) if model.path_ is not None else int(rounds)
    # a constant per-round ε is not the story here: the whole run is one (ε, δ) composition per node
    history = {"privacy_bound": [None] * T, "iteration": list(range(1, T + 1))}
    train = {}
    if training:
        L = np.asarray(curves)
        history = {"train_loss": {"mean": L.mean(axis=0).tolist(), "min": L.min(axis=0).tolist(),
                                  "max": L.max(axis=0).tolist()}, **history}
        train = {"train_loss_mean": float(L[:, -1].mean()), "train_loss_min": float(L[:, -1].min()),
                 "train_loss_max": float(L[:, -1].max()), "base_rate_train_loss": _base_rate_loss(ys),
                 "handed_over_train_loss_mean": float(np.mean(train_final))}
    sizes = model.node_sizes_
    return {
        "history": history,
        "final": {
            **train,
            "privacy_bound": None, "epsilon": eps_final, "consensus_error_mean": float(np.mean(consensus)),
            "iterations": int(rounds), "runs": int(runs), "train_seconds_per_run": float(np.mean(secs)),
            "fit_seconds": fit_wall, "fit_cpu_seconds": fit_cpu,
            "wall_seconds": time.perf_counter() - t0,
            "privacy_per_node": rep.per_party if rep is not None else None,
            "handed_over": handed, "dp_base_rate": checked_rates,
            "dp_positive_share": rates if private else None,
            "column_bounds": model.column_bounds_.tolist(), "bounds_source": model.bounds_source_,
            **test,
            **({"node_choice": choices, "node_choice_reasons": model.node_choice_reasons_} if choices else {}),
            "evaluated_by": ("the simulation driver, from the released models" + (
                "; the training losses are monitoring (--monitor), outside the guarantee" if private and training
                else "" if training else "; test figures are local evaluation on the test set, no training-data "
                                         "function but the released models")),
        },
        "privacy": (dict(rep.to_dict(), private=True) if rep is not None else
                    nonprivate_privacy({"records": not_protected(
                        "records", "non-private run: every node broadcasts its model without noise")},
                        note="non-private run: epsilon is infinite")),
        "config": {
            "data": data, "protocol": "noisy-gradient-gossip", "n_samples": int(sum(x.shape[0] for x in Xs)),
            "n_features": int(Xs[0].shape[1]), "backend": backend, "nodes": nodes,
            "topology": str(topology) if not hasattr(topology, "nodes") else "networkx graph",
            "edges": int(G.number_of_edges()), "split": split, "uneven_ratio": uneven_ratio,
            "node_size_min": int(sizes.min()), "node_size_max": int(sizes.max()),
            "epsilon_target": epsilon, "delta": delta, "iterations": rounds, "runs": runs, "seed": seed,
            "noise_multiplier": model.noise_multiplier_, "row_clip": float(model.row_map_[2]),
            "range_quantile": model.range_quantile_, "momentum": model.momentum_, "schedule": model.regime_, "loss": "logistic",
            "intercept": True, "recalibrated": model.node_coefs_ is not None,
            "noise_source": model.noise_source_, "perturbation": "none",
        },
        "_model": {"coef": model.coef_, "intercept": np.float64(model.intercept_), "coefs": model.coefs_,
                   "intercepts": model.intercepts_, "classes": np.asarray(model.classes_),
                   "column_lo": model.column_bounds_[:, 0], "column_hi": model.column_bounds_[:, 1],
                   "row_clip": np.float64(model.row_map_[2]), "handed_over": np.str_(model.handed_over_ or "model"),
                   "margin_clip": np.float64(model.margin_clip_ if model.margin_clip_ is not None else np.inf)},
        # each node's recalibrated model: a function of its own rows the report does not cover, so in a file of its
        # own (node_models.npz), never beside the shareable model
        "_node_models": None if model.node_coefs_ is None else {
            "node_coefs": model.node_coefs_, "node_intercepts": model.node_intercepts_,
            "calibration": model.calibration_, "choice": np.asarray(model.node_choice_),
            # each node's 5-fold CV log loss on its own rows of its recalibrated consensus, own model and own base
            # rate (local evaluation: the node's, never in metrics.json)
            "choice_cv_local": model.node_choice_cv_, "column_lo": model.column_bounds_[:, 0],
            "column_hi": model.column_bounds_[:, 1], "row_clip": np.float64(model.row_map_[2])},
    }
