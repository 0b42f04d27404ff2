"""``dpadmm vertical experts --target regression``: each feature party's DP ridge on its own columns, stacked by the
label party with its own model or its own model kept (:class:`~dpadmm.VerticalExpertsRegressor`), in-process.

A private run declares its target (``--target regression``: never read off the labels) and its label range
(``--label-range LO,HI``: the labels are clipped to it before they are sent; never read off the labels either);
``--label-epsilon E`` (with ``--label-range``) sends instead the labels' one release by randomized response on bins of
that range (label ε = E against the other parties). The
figures (RMSE, MAE, R², on the test rows) sit beside the mean predictor (the training mean: the label party's own),
the label party alone (its own model: its standardised columns, ridge, exact labels — local) and pooled non-private
(the same ridge on every column: the simulation driver's reference, outside the guarantee)."""

from __future__ import annotations

from pathlib import Path

from .._jsonio import write_json
from ..exceptions import InvalidParameterError, PrivacyPreconditionError
from ._common import console, elapsed, output_dir

#: the printed lines: (metrics.json key, label, format)
LINES = (("rmse", "RMSE", ".4g"), ("mae", "MAE", ".4g"), ("r2", "R²", ".3f"))
BASELINES = (("mean_predictor", "mean predictor"), ("label_party_alone", "label party alone"),
             ("pooled_nonprivate", "pooled non-private"))


def parse_label_range(text: str | None):
    """``--label-range LO,HI`` as two finite numbers lo < hi, or ``None`` (one clear line otherwise)."""
    if text is None:
        return None
    from ..algorithms.experts.regression import check_label_range

    try:
        return check_label_range([v.strip() for v in str(text).split(",")] if "," in str(text) else [text])
    except InvalidParameterError:
        raise InvalidParameterError(f"--label-range {text}: give two numbers LO,HI with LO < HI (the range the labels "
                                    "are clipped to, e.g. --label-range 0,20000).") from None


def check_options(*, epsilon, label_epsilon, label_range, min_effective_rows, prepare: str) -> None:
    """One clear line for an option the regression target does not take (before any data are read)."""
    if label_epsilon is not None and label_range is None:
        raise InvalidParameterError("--label-epsilon needs --label-range LO,HI: the randomized response's bins are "
                                    "public values of the declared range (one read off the labels would release them "
                                    "unaccounted); declare the range the labels are clipped to.")
    if min_effective_rows is not None:
        raise InvalidParameterError("--min-effective-rows is for randomized-response labels (binary target); drop it.")
    if epsilon is not None and label_range is None:
        raise InvalidParameterError("--target regression with --epsilon needs --label-range LO,HI: a range read off "
                                    "the labels moves with one record's label, which the parties' sensitivity bound "
                                    "does not cover; declare the range the labels are clipped to.")
    if prepare == "standardize":
        raise PrivacyPreconditionError(
            "--protocol experts protects each record of a party's block as it is used (replace one row): a party "
            "standardised by its own column statistics moves every row when one record is replaced; drop --prepare "
            "(each party then bounds its own columns by a DP range estimate) or declare its bounds with --bounds FILE.")


def _figures(y, mu) -> dict:
    import numpy as np

    from ..estimators.vertical_experts_regression import VerticalExpertsRegressor

    return VerticalExpertsRegressor.metrics_from_prediction(mu, np.asarray(y, dtype=np.float64))


def _stack(blocks):
    import numpy as np
    import scipy.sparse as sp

    return sp.hstack(blocks, format="csr") if any(sp.issparse(b) for b in blocks) else np.hstack(blocks)


def run_experts_regression(data, *, lam: float, epsilon, delta: float, label_range, loss: str, prepare: str,
                           row_clip, seed, out: Path | None, bounds=None, label_epsilon=None) -> dict:
    """Fit, print the figures beside the baselines, write metrics.json; returns the metrics."""
    import numpy as np

    from ..algorithms.experts import stack
    from ..algorithms.experts.alone import label_party_alone_prediction
    from ..estimators.vertical_experts_regression import VerticalExpertsRegressor

    R, train, test, col_bounds, prepared = other_blocks(data, bounds, prepare, row_clip)
    y = np.asarray(data.y, dtype=np.float64)
    model = VerticalExpertsRegressor(lam=lam, epsilon=epsilon, delta=delta, label_range=label_range, loss=loss,
                                     row_clip=R, random_state=seed, bounds=col_bounds,
                                     label_epsilon=label_epsilon).fit(train, y)
    cal = model.calibration_
    final: dict = {"protocol": "experts", "target": "regression",
                   "calibration": stack.facts(cal) if cal is not None else None,
                   "expert_lambdas": model.expert_lambdas_, "label_range": [float(v) for v in model.label_range_]}
    baselines: dict = {}
    if test is not None:
        yt = np.asarray(data.y_test, dtype=np.float64)
        final.update({f"test_{k}": v for k, v in _figures(yt, model.predict(test)).items()})
        final["n_test"] = int(yt.size)
        baselines = {
            "mean_predictor": dict(_figures(yt, np.full(yt.size, y.mean())), source="training-labels"),
            "label_party_alone": _figures(yt, label_party_alone_prediction(data.train[0], y, data.test[0], lam)),
            "pooled_nonprivate": _figures(yt, label_party_alone_prediction(_stack(data.train), y, _stack(data.test),
                                                                            lam))}
    rep = model.privacy_
    privacy = rep.to_dict() if rep is not None else {"private": False, "epsilon": "inf"}
    privacy["noise_source"] = model.noise_source_
    metrics = {"config": {"protocol": "experts", "target": "regression", "loss": loss, "lam": lam, "epsilon": epsilon,
                          "label_epsilon": label_epsilon, "delta": delta,
                          "label_range": None if label_range is None else list(label_range),
                          "noise_norm": model.noise_norm, "row_clip": R, "seed": seed,
                          "prepare": prepared,
                          "party_sizes": [int(B.shape[1]) for B in train], "backend": "inprocess"},
               "final": final, "baselines": baselines, "privacy": privacy}
    console.print(f"experts, regression ({loss} loss): label party + {len(train) - 1} "
                  f"part{'y' if len(train) == 2 else 'ies'}, one release each; labels clipped to "
                  f"[{model.label_range_[0]:g}, {model.label_range_[1]:g}]"
                  + (" (declared)" if label_range is not None else " (read off the labels: a non-private run)"))
    if cal is not None and cal.heldout_rows >= 10:
        console.print(f"calibration on {cal.heldout_rows} of the label party's own held-out training rows: "
                      + ("kept the stacked combination" if cal.kind == "stacked" else
                         "kept its own model (the stack did not beat it by two standard errors)")
                      + f"; held-out MSE own {cal.loss_own:.4g}, stacked {cal.loss_stacked:.4g}", soft_wrap=True)
    elif cal is not None:
        console.print("calibration: too few rows to hold out for the cross-validation; the label party kept its own "
                      "model", soft_wrap=True)
    if "n_test" in final:
        for k, label, fmt in LINES:
            others = "; ".join(f"{name} {baselines[key][k]:{fmt}}" for key, name in BASELINES)
            console.print(f"test {label} (n = {final['n_test']:,}): model {final[f'test_{k}']:{fmt}}; {others}")
    else:
        console.print("no test rows: give --test-party files (or --test with --train) to judge the model.")
    console.print("privacy: " + ("\n  ".join(rep.summary().splitlines()) if rep is not None else
                                 "not private (no --epsilon, no --label-epsilon): features and labels are not "
                                 "protected"))
    if out is not None:
        with output_dir(out) as stage:
            metrics["wall_seconds"] = elapsed()
            write_json(stage / "metrics.json", metrics)
        console.print(f"wrote {out}/metrics.json")
    return metrics


def other_blocks(data, bounds, prepare: str, row_clip):
    """``(R, train, test, column bounds, the metrics' "prepare" record)`` of an experts run beyond yes/no: the row
    clip (default 1), the parties' blocks with every other party's prepared as ``--prepare`` says (``auto``: raw),
    and their column bounds — one ``--bounds FILE`` per other party, else a DP estimate for raw columns (``"dp"``),
    else None."""
    from ..data.prepare import prepare_block
    from ._vertical_options import bounds_file

    R = float(row_clip) if row_clip is not None else 1.0
    how = "none" if prepare == "auto" else prepare
    train, test = list(data.train), list(data.test) if data.test is not None else None
    declared = list(bounds or [])
    if declared and len(declared) != len(train) - 1:
        raise InvalidParameterError(f"--bounds: give one FILE per party other than the label party ({len(train) - 1}), "
                                    f"in --party order; got {len(declared)}.")
    if declared and prepare != "auto":
        raise InvalidParameterError("--bounds bounds each party's raw columns itself: drop --prepare.")
    if how != "none":
        for m in range(1, len(train)):
            train[m], sc = prepare_block(train[m], how)
            if test is not None:
                test[m] = prepare_block(test[m], how, scaling=sc)[0]
    col_bounds = ([bounds_file(f, int(B.shape[1])) for f, B in zip(declared, train[1:])] if declared else
                  "dp" if how == "none" and prepare == "auto" else None)
    prepared = {"label_party": "standardize", "others": how,
                "others_bounds": "declared" if declared else "dp" if col_bounds == "dp" else "none"}
    return R, train, test, col_bounds, prepared


def command(inp, prep, lam, min_effective_rows, epsilon, label, delta, bounds, seed, out, where, label_range,
            loss) -> None:
    """``dpadmm vertical experts --target regression`` (in-process), from the command's options."""
    from .._validation import check_choice, check_positive
    from . import _vertical_options as vo

    check_positive("lam", lam)
    vo.check_budget(epsilon, delta, None, None)
    check_choice("loss", loss, ("squared", "huber"))
    check_choice("prepare", prep.prepare, ("auto", "standardize", "normalize-rows", "none"))
    if prep.row_clip is not None:
        check_positive("row_clip", prep.row_clip)
    rng_ = parse_label_range(label_range)
    check_options(epsilon=epsilon, label_epsilon=label.label_epsilon, label_range=rng_,
                       min_effective_rows=min_effective_rows, prepare=prep.prepare)
    where.run_options(out=out)  # --peer/--tls/--insecure without --backend grpc: one clear error
    run_experts_regression(inp.load(encode=False), lam=lam, epsilon=epsilon, delta=delta, label_range=rng_,
                           loss=loss, prepare=prep.how, row_clip=prep.row_clip, seed=seed, out=out, bounds=bounds,
                           label_epsilon=label.label_epsilon)
