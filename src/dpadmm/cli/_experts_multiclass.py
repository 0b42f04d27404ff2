"""``dpadmm vertical experts --target multiclass``: each feature party's ONE multi-output DP ridge on one-hot targets
of the declared classes, stacked multinomially by the label party with its own model or its own model kept
(:class:`~dpadmm.VerticalExpertsMulticlassClassifier`), in-process.

A private run (``--epsilon`` or ``--label-epsilon``) declares its classes (``--classes A,B,...``: K is the shape of
every party's release and the randomized response's alphabet, never read off the labels); ``--label-epsilon E`` sends
the other parties only the labels' one k-ary randomized response (label ε = E against them). The figures (accuracy,
log loss on the test rows) sit beside the class prior (the training shares: the label party's own), the label party
alone and pooled non-private (the simulation driver's reference, outside the guarantee)."""

from __future__ import annotations

from pathlib import Path

from .._jsonio import write_json
from ._common import console, elapsed, output_dir
from ._experts_regression import check_options, other_blocks

LINES = (("accuracy", "accuracy", ".4f"), ("log_loss", "log loss", ".4f"))
BASELINES = (("class_prior", "class prior"), ("label_party_alone", "label party alone"),
             ("pooled_nonprivate", "pooled non-private"))


def run_experts_multiclass(data, *, classes, lam: float, epsilon, delta: float, prepare: str, row_clip, seed,
                           out: Path | None, bounds=None, label_epsilon=None) -> dict:
    """Fit, print the figures beside the baselines, write metrics.json; returns the metrics."""
    import numpy as np

    from .._validation import declared_index
    from ..algorithms.experts import stack_multiclass as sm
    from ..estimators.vertical_experts_multiclass import VerticalExpertsMulticlassClassifier
    from ..workflows.gossip_targets import _class_metrics, as_declared
    from ..workflows.vertical_targets import _class_baselines, check_declared_classes

    R, train, test, col_bounds, prepared = other_blocks(data, bounds, prepare, row_clip)
    y = as_declared(data.y, classes)
    yt = None if data.test is None else as_declared(data.y_test, classes)
    if yt is not None:
        check_declared_classes(data.y_test, classes, False, "the test label column")
    model = VerticalExpertsMulticlassClassifier(classes=classes, lam=lam, epsilon=epsilon, delta=delta, row_clip=R,
                                                random_state=seed, bounds=col_bounds,
                                                label_epsilon=label_epsilon).fit(train, y)
    cal = model.calibration_
    final: dict = {"protocol": "experts", "target": "multiclass", "calibration": sm.facts(cal) if cal else None,
                   "expert_lambdas": model.expert_lambdas_}
    if label_epsilon is not None:
        final["label_release"] = {"n_classes": int(classes.size), "change_probability": model.change_probability_}
    baselines: dict = {}
    if yt is not None:
        P = model.predict_proba(test)
        final.update({f"test_{k}": v for k, v in _class_metrics(P, classes[np.argmax(P, axis=1)], yt, classes).items()})
        final["n_test"] = int(yt.size)
        baselines = _class_baselines(data, classes, declared_index(classes, y), declared_index(classes, yt), lam)
    rep = model.privacy_
    privacy = rep.to_dict() if rep is not None else {"private": False, "epsilon": "inf"}
    privacy["noise_source"] = model.noise_source_
    metrics = {"config": {"protocol": "experts", "target": "multiclass", "classes": classes.tolist(), "lam": lam,
                          "epsilon": epsilon, "label_epsilon": label_epsilon, "delta": delta,
                          "noise_norm": model.noise_norm, "row_clip": R, "seed": seed,
                          "prepare": prepared,
                          "party_sizes": [int(B.shape[1]) for B in train], "backend": "inprocess"},
               "final": final, "baselines": baselines, "privacy": privacy}
    console.print(f"experts, multiclass ({classes.size} classes: {', '.join(map(str, classes))}): label party + "
                  f"{len(train) - 1} part{'y' if len(train) == 2 else 'ies'}, one release each")
    if cal is not None and cal.heldout_rows >= 10:
        console.print(f"calibration on {cal.heldout_rows} of the label party's own held-out training rows: "
                      + ("kept the multinomial stack" if cal.kind == "stacked" else
                         "kept its own model (the stack did not beat it by two standard errors)")
                      + f"; held-out log loss own {cal.loss_own:.4f}, stacked {cal.loss_stacked:.4f}", soft_wrap=True)
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


def command(inp, prep, lam, min_effective_rows, epsilon, label, delta, bounds, seed, out, where, classes) -> None:
    """``dpadmm vertical experts --target multiclass`` (in-process), from the command's options; ``classes`` the
    checked classes (:func:`dpadmm.cli._vertical_targets.resolve`)."""
    from .._validation import check_choice, check_positive
    from . import _vertical_options as vo

    check_positive("lam", lam)
    vo.check_budget(epsilon, delta, None, None)
    check_choice("prepare", prep.prepare, ("auto", "standardize", "normalize-rows", "none"))
    if prep.row_clip is not None:
        check_positive("row_clip", prep.row_clip)
    check_options(epsilon=epsilon, label_epsilon=label.label_epsilon, label_range=(0.0, 1.0),
                  min_effective_rows=min_effective_rows, prepare=prep.prepare)
    where.run_options(out=out)  # --peer/--tls/--insecure without --backend grpc: one clear error
    run_experts_multiclass(inp.load(encode=False), classes=classes, lam=lam, epsilon=epsilon, delta=delta,
                           prepare=prep.how, row_clip=prep.row_clip, seed=seed, out=out, bounds=bounds,
                           label_epsilon=label.label_epsilon)
