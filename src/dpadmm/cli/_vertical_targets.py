"""``dpadmm vertical admm --target regression|count|multiclass``: which target the run is (declared in a private run;
inferred from the label column of a non-private one, with one line on stderr; multiclass always declared), the options
those targets honour, the run and its report (:func:`dpadmm.workflows.vertical_targets.run_vertical_target`,
:func:`~dpadmm.workflows.vertical_targets.run_vertical_multiclass`). The binary target is :mod:`.vertical`'s; its
classes (``--classes NEG,POS``) are resolved here."""

from __future__ import annotations

import warnings

from ..exceptions import InvalidDataError, InvalidParameterError
from .._jsonio import write_json
from ._common import console, elapsed, err_console, output_dir

#: the printed lines of each target: (metrics.json key, label, format)
LINES = {"regression": (("rmse", "RMSE", ".4g"), ("mae", "MAE", ".4g"), ("r2", "R²", ".3f")),
         "count": (("poisson_deviance", "Poisson deviance", ".4f"), ("rmse", "RMSE", ".4g"), ("mae", "MAE", ".4g"),
                   ("r2", "R²", ".3f")),
         "multiclass": (("accuracy", "accuracy", ".4f"), ("log_loss", "log loss", ".4f"))}
#: the baselines printed beside the model: (metrics.json key, label); the first is the target's trivial predictor
OTHERS = (("label_party_alone", "label party alone"), ("pooled_nonprivate", "pooled non-private"))
BASELINES = {"regression": (("mean_predictor", "mean predictor"), *OTHERS),
             "count": (("mean_predictor", "mean predictor"), *OTHERS),
             "multiclass": (("class_prior", "class prior"), *OTHERS)}


def resolve(target, inp, backend: str, private: bool = False, classes=None):
    """``(target, classes)``: the target of this run (one line on stderr if it was inferred) and its declared classes
    (None: the binary default, :data:`dpadmm._validation.DEFAULT_BINARY`, or a multiclass run's classes read off a
    non-private column). The labels are read here only when this process holds the data (``--backend inprocess``);
    elsewhere only the binary target (the default there), whose labels the loader maps. A private run (``private``: a
    label or feature budget) never infers its target or counts its classes (red team 2026-11-29, T1, T3): binary
    unless ``--target`` says otherwise, every label mapped against the declared classes (``--classes NEG,POS``, else
    0/1 or -1/+1), and a label outside them refused by one line that does not depend on how often any class occurs."""
    from .._validation import binary_labels  # numpy: kept out of the CLI's start-up
    from ..workflows.gossip_targets import parse_classes
    from ..workflows.vertical_targets import check_declared_classes, resolve_vertical_target

    if classes is not None and target not in (None, "binary", "multiclass"):
        raise InvalidParameterError(f"--classes is for the binary and multiclass targets; drop it with --target {target}.")
    if target == "multiclass" and classes is None and private:
        raise InvalidParameterError("--target multiclass with --label-epsilon needs --classes A,B,... (how many joint "
                                    "runs the other parties take part in follows from them, so they are declared, not "
                                    "read off the labels).")
    binary = target in (None, "binary") and (private or classes is not None)
    declared = None if classes is None else parse_classes(classes, sort=not binary)
    if binary and declared is not None and declared.size != 2:
        raise InvalidParameterError(f"--classes {classes}: a binary run declares two classes, negative then positive "
                                    "(e.g. --classes no,yes); give --target multiclass for more.")
    if backend != "inprocess" or inp.data is not None:
        if target not in (None, "binary"):
            why = "the bundled a9a has yes/no labels" if inp.data is not None else \
                f"--backend {backend} is for the binary target for now"
            raise InvalidParameterError(f"--target {target}: {why}; give --backend inprocess with --party or --train "
                                        "files, or drop --target.")
        return "binary", declared
    inp.check()
    if binary:  # the binary domain, mapped label by label: nothing here counts the classes present
        try:
            binary_labels("the label column", inp.labels(), private=True, classes=declared, declarable=True)
        except InvalidDataError as exc:
            raise InvalidParameterError(f"{str(exc)[:-1]}; for amounts, counts or more classes give --target "
                                        "regression, count or multiclass (a private run declares its target rather "
                                        "than reading it off the labels).") from None
        return "binary", declared
    if target == "multiclass":
        return "multiclass", check_declared_classes(inp.labels(), declared, private)
    kind, line = resolve_vertical_target(target, inp.labels(), private=private)
    if line:
        err_console.print(line)
    return kind, None


def check_options(target: str, run) -> None:
    """One clear error for an option the regression and count runs do not honour (before any data are read)."""
    if run.feature_private:
        raise InvalidParameterError(f"--epsilon, --iteration-epsilon and --noise-scale (feature-side privacy) are for "
                                    f"the binary target for now; with --target {target} protect the labels with "
                                    "--label-epsilon (labels-only), or use the binary target.")
    if run.label.label_epsilon is not None and run.label.label_mechanism != "rr":
        raise InvalidParameterError(f"--label-mechanism {run.label.label_mechanism} is for the binary target; with "
                                    f"--target {target} the labels are released once by randomized response on bins "
                                    "(drop --label-mechanism).")
    given = [name for name, on in (("--monitor", run.monitor), ("--psi", run.psi),
                                   ("--transcript", run.state.transcript is not None),
                                   ("--checkpoint-every", run.state.checkpoint_every is not None),
                                   ("--resume", run.state.resume is not None),
                                   ("--adaptive-rho", run.model.adaptive_rho), ("--rho", run.model.rho is not None))
             if on]
    if given:
        raise InvalidParameterError(f"{', '.join(given)}: for the binary target; drop {'it' if len(given) == 1 else 'them'}"
                                    f" with --target {target}.")


def run(target: str, run, settings, classes=None) -> None:
    """Fit, print the target's figures beside its baselines, write metrics.json and model.npz (``classes``: a
    multiclass run's, from :func:`resolve`)."""
    import numpy as np  # with the workflow: kept out of the CLI's start-up

    from ..data.vertical import prepared
    from ..workflows.vertical_targets import LOSS, run_vertical_multiclass, run_vertical_target

    check_options(target, run)
    data = run.inp.load(encode=False)
    data = prepared(data, settings.prepare)
    with output_dir(run.out) as stage, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="ADMM did not reach tol")  # the rounds run are printed below
        fit = run_vertical_multiclass if target == "multiclass" else run_vertical_target
        metrics = fit(**({"classes": classes} if target == "multiclass" else {"target": target}), data=data,
                      lam=run.lam, label_epsilon=run.label.label_epsilon, iterations=run.iterations, seed=run.seed,
                      fit_intercept=not run.model.no_intercept)
        model, f, b = metrics.pop("_model"), metrics["final"], metrics["baselines"]
        console.print(f"vertical ADMM sharing, {target} ({LOSS[target]} loss): parties {tuple(data.party_sizes)}, "
                      f"{f['iterations']} rounds" + (" on the released labels" if "label_release" in f else ""))
        if "label_party_choice" in f:
            console.print(f"label party kept {'the joint model' if f['label_party_choice'] == 'joint' else 'its own model'}"
                          " (cross-validated on its own rows; the choice stays with it)")
        if "n_test" in f:
            for k, label, fmt in LINES[target]:
                others = "; ".join(f"{name} {b[key][k]:{fmt}}" for key, name in BASELINES[target])
                console.print(f"test {label} (n = {f['n_test']:,}): model {f[f'test_{k}']:{fmt}}; {others}")
        else:
            console.print("no test rows: give --test-party files (or --test with --train) to judge the model.")
        console.print("privacy: " + "\n  ".join(metrics["privacy"]["summary"]))
        metrics["config"].update(prepare=settings.prepare, iterations=run.iterations)
        metrics["fit_seconds"] = f.pop("fit_seconds")
        metrics["wall_seconds"] = elapsed()
        if run.out is not None:
            np.savez(stage / "model.npz", **model)
            write_json(stage / "metrics.json", metrics)
    if run.out is not None:
        console.print(f"wrote {run.out}/metrics.json and model.npz")


def experts_target(target, classes, label_range, loss, inp, prep, lam, min_effective_rows, epsilon, label, delta,
                   bounds, seed, out, where) -> bool:
    """``dpadmm vertical experts`` beyond yes/no: run ``--target regression`` or ``multiclass`` by its own command and
    say so (True), refuse ``--target count`` and options of another target; False for the binary target."""
    backend = where.backend
    if (target == "multiclass") != (classes is not None) and (classes is not None or epsilon is not None):
        raise InvalidParameterError("--classes A,B,... goes with --target multiclass, and a private multiclass run "
                                    "declares it (K is the shape of every party's release; never read off the labels).")
    kind, declared = resolve(target, inp, backend, private=epsilon is not None or label.label_epsilon is not None,
                             classes=classes)
    if kind == "multiclass":
        from ._experts_multiclass import command as multiclass

        multiclass(inp, prep, lam, min_effective_rows, epsilon, label, delta, bounds, seed, out, where, declared)
        return True
    if kind == "count":
        raise InvalidParameterError("--target count is not available for --protocol experts; use --target regression, "
                                    "or `dpadmm vertical admm --target count`.")
    if kind == "regression":
        from ._experts_regression import command

        command(inp, prep, lam, min_effective_rows, epsilon, label, delta, bounds, seed, out, where, label_range, loss)
        return True
    if label_range is not None or loss != "squared":
        raise InvalidParameterError("--label-range and --loss are for --target regression; drop them.")
    return False
