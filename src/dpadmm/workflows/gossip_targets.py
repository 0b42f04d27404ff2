"""``dpadmm consensus gossip --target regression|multiclass``: which target a label column is, and R runs of
:class:`~dpadmm.estimators.consensus_targets.ConsensusLinearRegression` or
:class:`~dpadmm.estimators.consensus_targets.ConsensusMultinomialClassifier` with the metrics that fit the target.

The binary target stays :func:`dpadmm.workflows.gossip.run_gossip`'s. Baselines as that job's base rate: the mean
predictor (the class prior) is the training mean (the training class shares) in a non-private run and, in a private
run, which keeps no exact training statistic, the test set's own — local evaluation on the evaluator's rows
(``*_source``: ``training-labels`` or ``test-set``); pooled non-private (scikit-learn on every node's training rows)
is the simulation driver's reference, computed from rows it holds, outside the guarantee."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import pandas as pd
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from ..backends import get_backend
from ..data.graphs import make_graph, split_indices
from ..estimators.consensus_targets import ConsensusLinearRegression, ConsensusMultinomialClassifier
from .._validation import numeric_labels
from ..exceptions import InvalidParameterError
from ..privacy.ledger import nonprivate_privacy, not_protected

TARGETS = ("binary", "regression", "multiclass")
MAX_INFERRED_CLASSES = 20  # integer-valued labels with 3..20 distinct values are inferred as classes
OVERRIDE = "override with --target binary|regression|multiclass"


def resolve_target(target: str | None, y) -> tuple[str, str | None]:
    """``(target, line)``: the target, given or inferred from the labels ``y`` (2 distinct values: binary; integer
    valued with 3..20: multiclass; otherwise regression), and the line saying it was inferred (None when given or
    binary, the command's behaviour before ``--target``). A label column the target cannot use: one clear error."""
    if target is not None and target not in TARGETS:
        raise InvalidParameterError(f"--target must be binary, regression or multiclass, got {target!r}.")
    if target == "binary":
        return "binary", None  # run_gossip's own checks (two classes)
    num = numeric_labels(y)
    if num is not None and not np.all(np.isfinite(num)):
        bad = int(np.sum(~np.isfinite(num)))
        raise InvalidParameterError(f"the label column holds {bad} missing or infinite value(s); drop those rows or "
                                    "fill them in before training.")
    values = np.unique(np.asarray(y).ravel() if num is None else num)
    integer = num is None or bool(np.all(num == np.round(num)))
    if target is None:
        if values.size == 2:
            return "binary", None
        if integer and 3 <= values.size <= MAX_INFERRED_CLASSES:
            target, why = "multiclass", f"{values.size} distinct integer values"
        else:
            target = "regression"
            why = f"{values.size} distinct values" + ("" if integer else ", not all integers")
        if target == "regression" and num is None:
            raise InvalidParameterError(f"the label column holds {values.size} distinct non-numeric values; give "
                                        "numbers, or --target multiclass to treat them as classes.")
        return target, f"target: {target} (inferred from the label column: {why}); {OVERRIDE}."
    if target == "multiclass" and not integer:
        raise InvalidParameterError(f"--target multiclass needs class labels, but the label column holds "
                                    f"{values.size} distinct values, not all integers; use --target regression.")
    if target == "multiclass" and values.size < 2:
        raise InvalidParameterError("--target multiclass needs labels of at least two classes.")
    if target == "regression" and num is None:
        raise InvalidParameterError("--target regression needs numeric labels; use --target multiclass for classes.")
    return target, None


def parse_classes(text: str, sort: bool = True) -> np.ndarray:
    """``--classes A,B,...``, sorted (or as given: ``sort=False``, a binary run's negative then positive) and checked
    distinct: numbers when every one is a number, else text. Their kind comes from the option alone, never from the
    label column (whose type one record can change: red team T4)."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    try:
        parts = [float(p) for p in parts]
        parts = [int(p) if p == int(p) else p for p in parts]
    except (ValueError, OverflowError):
        pass
    classes = np.asarray(parts)
    if classes.size < 2 or np.unique(classes).size != classes.size:
        raise InvalidParameterError(f"--classes {text!r}: give at least two distinct classes, e.g. --classes 0,1,2.")
    return np.sort(classes) if sort else classes


def as_declared(y, classes: np.ndarray) -> np.ndarray:
    """Labels in the kind of the declared ``classes``: numbers (a label that is not one becomes NaN: no class) or
    text. Reads nothing but each label itself, and refuses nothing."""
    if classes.dtype.kind in "iuf":
        return pd.to_numeric(pd.Series(np.asarray(y, dtype=object).ravel()), errors="coerce").to_numpy(np.float64)
    return np.asarray(y, dtype=object).ravel().astype(str)


def _regression_metrics(pred, y) -> dict:
    err = np.asarray(pred, dtype=np.float64) - y
    ss = float(np.sum((y - y.mean()) ** 2))
    return {"rmse": float(np.sqrt(np.mean(err ** 2))), "mae": float(np.mean(np.abs(err))),
            "r2": float(1.0 - np.sum(err ** 2) / ss) if ss > 0 else float("nan")}


def _class_metrics(P, pred, y, classes) -> dict:
    idx = np.searchsorted(classes, y)
    known = (idx < len(classes)) & (classes[np.minimum(idx, len(classes) - 1)] == y)
    p = np.where(known, P[np.arange(len(y)), np.minimum(idx, len(classes) - 1)], 0.0)
    return {"accuracy": float(np.mean(np.asarray(pred) == y)),
            "log_loss": float(-np.mean(np.log(np.clip(p, 1e-15, 1.0))))}


def _baselines(target: str, Xs, ys, X_test, y_test, private: bool, classes=None) -> dict:
    """The trivial predictor (source as run_gossip's base rate) and pooled non-private, on the test rows. ``classes``:
    the run's (declared in a private run): the trivial predictor's classes are these, never the ones the training
    labels happen to hold (one training label would move a private run's "test-set" prior: red team 2026-11-29, T5),
    and the pooled reference fits the rows of a declared class (a label outside them is no class)."""
    X, y = np.concatenate(Xs), np.concatenate(ys)
    ref = y_test if private else y
    source = "test-set" if private else "training-labels"
    if target == "regression":
        mean = _regression_metrics(np.full(len(y_test), float(np.mean(ref))), y_test)
        pooled = _regression_metrics(LinearRegression().fit(X, y).predict(X_test), y_test)
        return {**{f"test_mean_predictor_{k}": v for k, v in mean.items()}, "test_mean_predictor_source": source,
                **{f"pooled_test_{k}": v for k, v in pooled.items()}}
    classes = np.unique(y) if classes is None else np.asarray(classes)
    prior = np.array([np.mean(ref == c) for c in classes])
    P = np.tile(prior, (len(y_test), 1))
    trivial = _class_metrics(P, np.full(len(y_test), classes[np.argmax(prior)]), y_test, classes)
    keep = np.isin(y, classes)
    m = make_pipeline(StandardScaler(), LogisticRegression(C=1e4, max_iter=2000)).fit(X[keep], y[keep])
    Pm = np.zeros((len(y_test), len(classes)))
    Pm[:, np.searchsorted(classes, m.classes_)] = m.predict_proba(X_test)
    pooled = _class_metrics(Pm, m.predict(X_test), y_test, classes)
    return {**{f"test_class_prior_{k}": v for k, v in trivial.items()}, "test_class_prior_source": source,
            **{f"pooled_test_{k}": v for k, v in pooled.items()}}


def run_gossip_target(*, target: str, data: str, Xs, ys, split: str, topology="ring", epsilon: float | None = 1.0,
                      delta: float = 1e-5, rounds: int | None = None, runs: int = 1, seed: int | None = None,
                      bounds=None, backend: str = "inprocess", backend_options: dict | None = None, X_test=None,
                      y_test=None, progress: Callable | None = None, classes=None) -> dict:
    """R runs of the target's estimator on the nodes' rows ``Xs``/``ys`` (as given or already split), in
    run_gossip's metrics.json layout: ``final`` the test figures of the consensus model (the mean over runs, per run
    in ``test_<metric>_runs``) beside the trivial predictor and pooled non-private."""
    nodes, data_seed = len(Xs), 0 if seed is None else seed
    G = make_graph(topology, nodes, random_state=np.random.default_rng([data_seed, 2]))
    private = epsilon is not None
    t0, figures, model, done, fit_wall, fit_cpu = time.perf_counter(), [], None, 0, 0.0, 0.0
    if classes is not None:  # the labels in the declared classes' kind (anything else: no class)
        ys = [as_declared(v, classes) for v in ys]
        y_test = None if y_test is None else as_declared(y_test, classes)
    for r in range(runs):
        cb = [] if progress is None else [lambda t, rec, off=done: progress(off + t, rec)]
        rs = None if seed is None else int(np.random.SeedSequence([seed, r]).generate_state(1)[0])
        common = dict(n_nodes=nodes, topology=G, epsilon=epsilon, delta=delta, rounds=rounds, bounds=bounds,
                      backend=get_backend(backend, **(backend_options or {})), random_state=rs)
        w0, c0 = time.perf_counter(), time.process_time()
        model = (ConsensusLinearRegression(**common) if target == "regression"
                 else ConsensusMultinomialClassifier(**common, classes=classes)).fit(list(Xs), list(ys), callbacks=cb)
        fit_wall, fit_cpu = fit_wall + time.perf_counter() - w0, fit_cpu + time.process_time() - c0
        done += model.n_iter_
        if X_test is not None:
            figures.append(_regression_metrics(model.predict(X_test), y_test) if target == "regression" else
                           _class_metrics(model.predict_proba(X_test), model.predict(X_test), y_test, model.classes_))
    rep = model.privacy_
    final = {"epsilon": float(rep.epsilon) if rep is not None else None, "runs": int(runs),
             "iterations": int(model.rounds_), "wall_seconds": time.perf_counter() - t0,
             "fit_seconds": fit_wall, "fit_cpu_seconds": fit_cpu,
             "privacy_per_node": rep.per_party if rep is not None else None,
             "column_bounds": model.column_bounds_.tolist(), "bounds_source": model.bounds_source_,
             "evaluated_by": "the simulation driver, from the released models; the pooled non-private baseline is "
                             "its reference from every node's training rows, outside the guarantee"}
    if target == "regression":
        final["target_bounds"] = [float(v) for v in model.target_bounds_]
    if figures:
        for k in figures[0]:
            final[f"test_{k}"] = float(np.mean([f[k] for f in figures]))
            final[f"test_{k}_runs"] = [f[k] for f in figures]
        final.update(_baselines(target, Xs, ys, X_test, y_test, private,
                                None if target == "regression" else np.asarray(model.classes_)), n_test=int(len(y_test)))
    sizes = model.node_sizes_
    return {
        "history": {"iteration": list(range(1, int(model.rounds_) + 1))},
        "final": final,
        "privacy": (dict(rep.to_dict(), private=True) if rep is not None else
                    nonprivate_privacy({"records": not_protected(
                        "records", "non-private run: every node broadcasts its model without noise")},
                        note="non-private run: epsilon is infinite")),
        "config": {"data": data, "protocol": "noisy-gradient-gossip", "target": target,
                   "loss": "squared" if target == "regression" else "multinomial",
                   "n_samples": int(sum(x.shape[0] for x in Xs)), "n_features": int(Xs[0].shape[1]),
                   "backend": backend, "nodes": nodes, "topology": str(topology), "split": split,
                   "edges": int(G.number_of_edges()), "node_size_min": int(sizes.min()),
                   "node_size_max": int(sizes.max()), "epsilon_target": epsilon, "delta": delta,
                   "iterations": rounds, "runs": runs, "seed": seed, "schedule": model.regime_,
                   "classes": None if target == "regression" else np.asarray(model.classes_).tolist()},
        "_model": {"coef": model.coef_, "intercept": np.asarray(model.intercept_), "coefs": model.coefs_,
                   "column_lo": model.column_bounds_[:, 0], "column_hi": model.column_bounds_[:, 1]},
    }


def split_rows(X, y, nodes: int, split: str, ratio: float, seed: int):
    """``--data`` split at random into ``nodes`` (the binary path's split, raw labels kept)."""
    idx = split_indices(len(y), nodes, split, ratio=ratio, random_state=np.random.default_rng([seed, 1]))
    return [X[i] for i in idx], [np.asarray(y)[i] for i in idx]
