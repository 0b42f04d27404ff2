"""The vertical job: load data, fit DP/non-private ADMM sharing, run baselines, collect metrics."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss, roc_auc_score

from ..data import load_a9a, load_libsvm, normalize_rows, partition_columns, read_party_files, row_norms
from ..data.datasets import A9A_PARTIES
from ..estimators import VerticalLogisticRegression
from .._validation import binary_labels
from ..exceptions import InvalidDataError, InvalidParameterError
from ..data.prepare import default_row_clip
from ..data.prepare import prepare_block
from ..data.remote import party_sources
from ..kernels.losses import get_loss
from ..algorithms.vertical.report import LABELS_READABLE
from ..algorithms.experts.alone import label_party_alone_proba
from ..privacy.ledger import render_side
from ..cli._baselines import base_rate_baseline


@dataclass
class VerticalData:
    """Training and (optional) test party blocks, labels in {−1, +1}, and where they came from."""

    train: list[np.ndarray]
    y: np.ndarray
    test: list[np.ndarray] | None = None
    y_test: np.ndarray | None = None
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def party_sizes(self) -> tuple[int, ...]:
        return tuple(b.shape[1] for b in self.train)


def _encode(y, y_test, where: str):
    """Labels → {−1, +1} (two classes required); test labels must use the training classes."""
    y_pm, classes = binary_labels(f"labels of {where}", y)
    yt = None
    if y_test is not None:
        arr = np.asarray(y_test).ravel()
        unknown = ~np.isin(arr, classes)
        if unknown.any():
            raise InvalidDataError(f"test labels contain {arr[unknown][0]!r}, not one of the training classes "
                                   f"{list(classes)}; use the same label coding.")
        yt = np.where(arr == classes[1], 1.0, -1.0)
    return y_pm, yt


def _parse_sizes(parties) -> list[int]:
    if isinstance(parties, str):
        try:
            return [int(p) for p in parties.split(",") if p.strip()]
        except ValueError:
            raise InvalidParameterError(f"--parties must be comma-separated integers like 66,57, got {parties!r}.") from None
    return [int(p) for p in parties]


def load_vertical_data(*, train=None, test=None, parties=None, party_files: Sequence = (),
                       test_party_files: Sequence = (), id_column: str = "id", label_column: str = "y",
                       bundled: bool = False) -> VerticalData:
    """Load a vertical dataset from LIBSVM files + party sizes, party CSVs, or the bundled a9a."""
    if bundled:
        X, y = load_a9a("train")
        Xt, yt = load_a9a("test")
        sizes = _parse_sizes(parties) if parties else list(A9A_PARTIES)
        return VerticalData(partition_columns(X, sizes), y, partition_columns(Xt, sizes), yt,
                            {"data": "a9a (bundled)", "parties": sizes})
    if party_files:
        if train is not None:
            raise InvalidParameterError("give either --train (LIBSVM) or --party files, not both.")
        blocks, labels, _, _ = read_party_files(party_files, id_column=id_column, label_column=label_column)
        tb, tl = None, None
        if test_party_files:
            if len(test_party_files) != len(party_files):
                raise InvalidParameterError(f"give one --test-party file per --party file "
                                            f"({len(party_files)}), got {len(test_party_files)}.")
            tb, tl, _, _ = read_party_files(test_party_files, id_column=id_column, label_column=label_column)
            for m, (a, b) in enumerate(zip(blocks, tb), start=1):
                if a.shape[1] != b.shape[1]:
                    raise InvalidDataError(f"test party {m} has {b.shape[1]} feature columns but training party {m} "
                                           f"has {a.shape[1]}; they must match.")
        labels, tl = _encode(labels, tl, "the first party file")
        return VerticalData(blocks, labels, tb, tl, {"party_files": [str(p) for p in party_files],
                                                     "test_party_files": [str(p) for p in test_party_files]})
    if train is None:
        raise InvalidParameterError("no data given: pass --data a9a (bundled), --train FILE --parties SIZES (LIBSVM) or one --party "
                                     "FILE per party (see docs/formats.md).")
    if not parties:
        raise InvalidParameterError("--train needs --parties, e.g. --parties 66,57 (column counts per party).")
    sizes = _parse_sizes(parties)
    X, y = load_libsvm(train)
    width = sum(sizes)
    if X.shape[1] > width:
        raise InvalidParameterError(f"party sizes {','.join(map(str, sizes))} sum to {width} but {train} uses "
                                    f"{X.shape[1]} features; give sizes that sum to the feature count.")
    # LIBSVM files need not use the last features (a9a.t never uses 123): the declared width rules
    X = np.pad(X, ((0, 0), (0, width - X.shape[1])))
    Xt = yt = None
    if test is not None:
        Xt, yt = load_libsvm(test)
        if Xt.shape[1] > width:
            raise InvalidParameterError(f"party sizes sum to {width} but {test} uses {Xt.shape[1]} features; "
                                        "give matching train and test files and sizes.")
        Xt = np.pad(Xt, ((0, 0), (0, width - Xt.shape[1])))
    blocks = partition_columns(X, sizes)
    tblocks = partition_columns(Xt, sizes) if Xt is not None else None
    y, yt = _encode(y, yt, str(train))
    return VerticalData(blocks, y, tblocks, yt, {"train": str(train), "test": str(test) if test else None,
                                                  "parties": sizes})


def normalized(data: VerticalData) -> VerticalData:
    """Per-party unit-norm rows ([Hu, Assumption 2.3]) for train and test."""
    return VerticalData([normalize_rows(b) for b in data.train], data.y,
                        [normalize_rows(b) for b in data.test] if data.test is not None else None,
                        data.y_test, dict(data.source, normalized_rows=True))


def row_clips(data: VerticalData, row_clip) -> list[float]:
    """R per party: ``"auto"`` = sqrt(d_m) (the RMS norm of a standardised row), or the given number."""
    return [default_row_clip(d) if row_clip in (None, "auto") else float(row_clip) for d in data.party_sizes]


def prepared(data: VerticalData, how: str, *, row_clip=None) -> VerticalData:
    """Party-local preparation (:func:`dpadmm.data.prepare.prepare_block`) of every block:
    statistics from the party's own training rows, reused for its test rows; ``row_clip``: a list of
    R per party (feature-private runs) or None."""
    if how == "none":
        return data
    if how == "normalize-rows":
        return normalized(data)
    clips = row_clip if row_clip is not None else [None] * len(data.train)
    train, test = [], [] if data.test is not None else None
    for m, B in enumerate(data.train):
        P, scaling = prepare_block(B, how, row_clip=clips[m])
        train.append(P)
        if test is not None:
            test.append(prepare_block(data.test[m], how, scaling=scaling, row_clip=clips[m])[0])
    return VerticalData(train, data.y, test, data.y_test,
                        dict(data.source, prepared=how, row_clip=row_clip))


def rows_are_normalized(blocks) -> bool:
    return all(np.all(np.abs(n[n > 0] - 1.0) <= 1e-6) for n in (row_norms(b) for b in blocks))


def _classifier_metrics(p_pos, y_pm) -> dict:
    y01 = (np.asarray(y_pm) > 0).astype(int)
    p = np.clip(p_pos, 1e-15, 1 - 1e-15)
    return {"log_loss": float(log_loss(y01, p, labels=[0, 1])),
            "accuracy": float(np.mean((p >= 0.5) == y01)),
            "auc": float(roc_auc_score(y01, p)) if 0 < y01.sum() < len(y01) else None}


def sklearn_baseline(blocks, y, test_blocks, y_test, *, lam: float, fit_intercept: bool = True) -> dict:
    """Centralised scikit-learn logistic regression (lbfgs) on the given blocks, same objective."""
    X = np.hstack(blocks)
    t0 = time.perf_counter()
    model = LogisticRegression(C=1.0 / (lam * X.shape[0]), fit_intercept=fit_intercept, max_iter=5000, tol=1e-8)
    model.fit(X, y)
    secs = time.perf_counter() - t0
    s = X @ model.coef_.ravel() + model.intercept_[0]
    obj = float(np.mean(np.logaddexp(0.0, -np.where(y > 0, 1.0, -1.0) * s)) + lam / 2 * np.sum(model.coef_ ** 2))
    out = {"train_objective": obj, "fit_seconds": secs}
    if test_blocks is not None:
        out.update({f"test_{k}": v for k, v in
                    _classifier_metrics(model.predict_proba(np.hstack(test_blocks))[:, 1], y_test).items()})
    return out


def _test_probability(model, test_blocks) -> np.ndarray:
    """P(y = +1) on the test set; party files (read by the parties) are scored at the parties."""
    if any(hasattr(b, "load") for b in test_blocks):
        return 1.0 / (1.0 + np.exp(-np.clip(model.eval_scores_["test"], -500, 500)))
    return model.predict_proba(test_blocks)[:, 1]


def load_vertical_sources(party_files, test_party_files=(), *, id_column: str = "id", label_column: str = "y",
                          normalize: bool = False, prepare: str = "none", row_clip=None) -> VerticalData:
    """Party CSVs as :class:`~dpadmm.data.remote.PartyFile` sources: each party's worker reads its own
    file; the driver reads only the first file's ids and labels (data locality)."""
    kw = dict(prepare=prepare, row_clip=row_clip)
    train, labels, _ = party_sources(party_files, id_column=id_column, label_column=label_column, normalize=normalize,
                                     **kw)
    test = test_labels = None
    if test_party_files:
        if len(test_party_files) != len(party_files):
            raise InvalidParameterError(f"give one --test-party file per --party file "
                                        f"({len(party_files)}), got {len(test_party_files)}.")
        test, test_labels, _ = party_sources(test_party_files, id_column=id_column, label_column=label_column,
                                             normalize=normalize, scaling_from=list(party_files), **kw)
        for m, (a, b) in enumerate(zip(train, test), start=1):
            if a.shape[1] != b.shape[1]:
                raise InvalidDataError(f"test party {m} has {b.shape[1]} feature columns but training party {m} "
                                       f"has {a.shape[1]}; they must match.")
    labels, test_labels = _encode(labels, test_labels, "the first party file")
    return VerticalData(train, labels, test, test_labels,
                        {"party_files": [str(p) for p in party_files],
                         "test_party_files": [str(p) for p in test_party_files],
                         "data_locality": "each party's worker reads its own file", "normalized_rows": normalize,
                         "prepared": prepare})


def model_loss(model):
    return get_loss(model._loss_name)


def run_vertical(data: VerticalData, *, lam: float = 1e-3, rho="auto", iterations="auto",
                 fit_intercept: bool = True, epsilon=None, delta: float = 1e-5, iteration_epsilon=None,
                 noise_scale=None, bound="auto", accountant: str = "pld", adaptive_rho: bool = False,
                 seed: int | None = None, tol: float = 1e-6, callbacks=(), backend="inprocess",
                 fit_kwargs=None, monitor: bool | None = None, mechanism: str = "gaussian",
                 relation: str = "feature_column", clip="auto", label_epsilon=None,
                 label_noise_scale=None, label_mechanism: str = "rr",
                 label_block_scale: float = 1.0) -> tuple[VerticalLogisticRegression, dict]:
    """Fit one vertical model and return it with its metrics dict (the metrics.json layout).

    ``seed=None`` (private default): party-local noise. ``monitor=None``: per-round monitoring only
    for non-private fits. Final metrics of a private fit come from the collected models when the
    driver holds them (in-process simulation, or ``monitor=True``) and are absent otherwise.
    ``fit_kwargs`` go to ``fit`` (checkpoint_dir/checkpoint_every/resume_from/transcript).
    """
    t0 = time.perf_counter()
    model = VerticalLogisticRegression(
        lam=lam, rho=rho, max_iter=iterations, tol=tol, fit_intercept=fit_intercept, epsilon=epsilon, delta=delta,
        iteration_epsilon=iteration_epsilon, noise_scale=noise_scale, bound=bound, accountant=accountant,
        adaptive_rho=adaptive_rho, random_state=seed, backend=backend, monitor=monitor, mechanism=mechanism,
        relation=relation, clip=clip, label_epsilon=label_epsilon, label_noise_scale=label_noise_scale,
        label_mechanism=label_mechanism, label_block_scale=label_block_scale)
    eval_set = {"test": (data.test, data.y_test)} if data.test is not None else None
    model.fit(data.train, data.y, eval_set=eval_set, callbacks=callbacks, **(fit_kwargs or {}))
    wall = time.perf_counter() - t0
    h = model.history_
    history = {k: h[k] for k in ("objective", "seconds", "train_loss", "primal_residual", "dual_residual", "rho")
               if k in h}
    final: dict[str, Any] = {"iterations": model.n_iter_, "converged": model.converged_,
                             "label_party_choice": getattr(model, "label_party_choice_", None),
                             # the label party's 5-fold cross-validated losses behind that choice (joint vs alone)
                             "label_party_cv": getattr(model, "label_party_cv_", None),
                             "passive_weight": getattr(model, "passive_weight_", None)}
    has_models = model.coefs_ is not None
    if has_models and not any(hasattr(b, "load") for b in data.train):
        # the released model's (after the label party's refit, which can differ from the last iterate);
        # evaluated by the driver, which holds the models only in the simulation (or with monitor=True)
        p = _test_probability(model, data.train)
        reg = 0.5 * float(model.coef_ @ model.coef_)
        final["train_objective"] = _classifier_metrics(p, data.y)["log_loss"] + lam * reg
    elif "objective" in h:
        final["train_objective"] = h["objective"][-1]
    if data.test is not None:
        for k in ("test_log_loss", "test_accuracy"):
            if k in h:
                history[k] = h[k]
        if has_models or "test" in getattr(model, "eval_scores_", {}):
            final.update({f"test_{k}": v for k, v in
                          _classifier_metrics(_test_probability(model, data.test), data.y_test).items()})
    if not has_models:
        final["note"] = ("private run on an out-of-process backend: the local models stayed at the parties, so the "
                         "driver reports no model quality (opt in with --monitor, outside the guarantee)"
                         if model.privacy_ is not None else
                         "the local models stayed at the parties (each wrote its own model file); the driver has "
                         "only the objective and the test scores the parties sent")
    if model.privacy_ is not None:
        privacy = model.privacy_.to_dict()
        privacy["private"] = model.privacy_.private
    else:
        privacy = {"private": False, "summary": None, "sides": {
                       "features": {"protected": False, "epsilon": "inf", "why": "non-private run: each party's "
                                    "shares D_m x_m are sent exactly"},
                       "labels": {"protected": False, "epsilon": "inf", "why": LABELS_READABLE.replace(
                           "labels are NOT protected: ", "").replace(" (use label_epsilon / --label-epsilon)", "")}},
                   "epsilon": "inf", "epsilon_side": "features", "delta": None, "accountant": None,
                   "paper_bound": {"epsilon": None}, "note": "non-private run: epsilon is infinite",
                   "label": {"protected": False, "epsilon": "inf", "note": LABELS_READABLE}}

        privacy["summary"] = [render_side(k, v) for k, v in privacy["sides"].items()]
    config = {"lam": lam, "rho": model._rho(len(data.train), model_loss(model)), "iterations": model._max_iter(),
              "fit_intercept": fit_intercept, "mechanism": mechanism, "relation": relation, "clip": clip,
              "label_epsilon": label_epsilon, "label_noise_scale": label_noise_scale,
              "label_mechanism": label_mechanism if (label_epsilon is not None and label_noise_scale is None) else None,
              "epsilon": epsilon, "delta": delta, "iteration_epsilon": iteration_epsilon,
              "noise_scale": noise_scale, "bound": bound, "accountant": accountant, "adaptive_rho": adaptive_rho,
              "seed": seed, "noise_source": model.noise_source_, "monitor": monitor, "tol": tol, "party_sizes": list(data.party_sizes), "n_train": int(len(data.y)),
              "n_test": int(len(data.y_test)) if data.y_test is not None else 0,
              "noise_multiplier": model.noise_multiplier_, "backend": getattr(backend, "name", str(backend)), **data.source}
    return model, {"history": history, "final": final, "privacy": privacy, "wall_seconds": wall, "config": config}


def baselines(data: VerticalData, *, lam: float, fit_intercept: bool = True, raw: VerticalData | None = None,
              private: bool = False) -> dict:
    """What the user has without the joint model, on the test set (empty without one): predicting the
    training base rate, and the label party alone. Given ``raw`` (the data as read, before any ``--prepare``), the
    label party alone is ONE fit per data set (:func:`dpadmm.algorithms.experts.alone.label_party_alone_proba`: its
    raw columns, its own standardisation, λ = ``BASELINE_LAM``), whatever the options; without it, a logistic
    regression on its own (prepared) block with ``lam`` (older callers). With data locality (party files read by
    the parties' workers) the driver reads no party file, so only the base rate is reported (the label party's own
    choice still guards the model)."""
    if data.test is None:
        return {}
    out = {"base_rate": base_rate_baseline(data.y, data.y_test, private=private)}  # private: no training count
    if hasattr(data.train[0], "load"):  # data locality: the driver reads no party file, not even the label party's
        return out
    if raw is not None and raw.test is not None and not hasattr(raw.train[0], "load"):
        p = label_party_alone_proba(raw.train[0], raw.y, raw.test[0], BASELINE_LAM)
        out["label_party_alone"] = {f"test_{k}": v for k, v in _classifier_metrics(p, raw.y_test).items()}
        return out
    alone = sklearn_baseline(data.train[:1], data.y, data.test[:1], data.y_test, lam=lam, fit_intercept=fit_intercept)
    out["label_party_alone"] = {k: v for k, v in alone.items() if k.startswith("test_")}
    return out


#: λ of the one "label party alone" baseline per data set (the library's default λ)
BASELINE_LAM = 1e-3
