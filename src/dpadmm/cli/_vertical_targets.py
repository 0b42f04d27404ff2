"""``dpadmm vertical admm --target regression|count``: which target the run is (declared in a private run; inferred from the
label column of a non-private one, with one line on stderr), the options those targets honour, the run and its report
(:func:`dpadmm.workflows.vertical_targets.run_vertical_target`). The binary target is :mod:`.vertical`'s."""

from __future__ import annotations

import warnings

from ..exceptions import InvalidParameterError
from .._jsonio import write_json
from ._common import console, elapsed, err_console, output_dir

#: the printed lines of each target: (metrics.json key, label, format)
LINES = {"regression": (("rmse", "RMSE", ".4g"), ("mae", "MAE", ".4g"), ("r2", "R²", ".3f")),
         "count": (("poisson_deviance", "Poisson deviance", ".4f"), ("rmse", "RMSE", ".4g"), ("mae", "MAE", ".4g"),
                   ("r2", "R²", ".3f"))}
BASELINES = (("mean_predictor", "mean predictor"), ("label_party_alone", "label party alone"),
             ("pooled_nonprivate", "pooled non-private"))


def resolve(target, inp, backend: str, private: bool = False) -> str:
    """The target of this run (one line on stderr if it was inferred). The labels are read here only when this
    process holds the data (``--backend inprocess``); elsewhere only the binary target (the default there). A private
    run (``private``: a label or feature budget) never infers it: the release mechanism the other parties receive and
    the printed line would depend on the exact labels (red team 2026-11-29, T1), so it is binary unless ``--target``
    says otherwise, and the binary path refuses labels that are not yes/no, naming ``--target``."""
    from ..workflows.vertical_targets import resolve_vertical_target  # scikit-learn: kept out of the CLI's start-up

    if backend != "inprocess" or inp.data is not None:
        if target not in (None, "binary"):
            why = "the bundled a9a has yes/no labels" if inp.data is not None else \
                f"--backend {backend} is for the binary target for now"
            raise InvalidParameterError(f"--target {target}: {why}; give --backend inprocess with --party or --train "
                                        "files, or drop --target.")
        return "binary"
    inp.check()
    if private and target is None:  # the binary domain: labels that are not yes/no are refused, not re-read as counts
        import numpy as np

        k = np.unique(np.asarray(inp.labels())).size
        if k != 2:
            raise InvalidParameterError(f"the label column is not yes/no ({k} distinct values); a private run declares "
                                        "its target rather than reading it off the labels: give --target regression or --target "
                                        "count.")
        return "binary"
    kind, line = resolve_vertical_target(target, inp.labels())
    if line:
        err_console.print(line)
    return kind


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


def run(target: str, run, settings) -> None:
    """Fit, print the target's figures beside its baselines, write metrics.json and model.npz."""
    import numpy as np  # with the workflow: kept out of the CLI's start-up

    from ..data.vertical import prepared
    from ..workflows.vertical_targets import LOSS, run_vertical_target

    check_options(target, run)
    data = run.inp.load(encode=False)
    data = prepared(data, settings.prepare)
    with output_dir(run.out) as stage, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="ADMM did not reach tol")  # the rounds run are printed below
        metrics = run_vertical_target(target=target, data=data, lam=run.lam, label_epsilon=run.label.label_epsilon,
                                      iterations=run.iterations, seed=run.seed,
                                      fit_intercept=not run.model.no_intercept)
        model, f, b = metrics.pop("_model"), metrics["final"], metrics["baselines"]
        console.print(f"vertical ADMM sharing, {target} ({LOSS[target]} loss): parties {tuple(data.party_sizes)}, "
                      f"{f['iterations']} rounds" + (" on the released labels" if "label_release" in f else ""))
        if "label_party_choice" in f:
            console.print(f"label party kept {'the joint model' if f['label_party_choice'] == 'joint' else 'its own model'}"
                          " (cross-validated on its own rows; the choice stays with it)")
        if "n_test" in f:
            for k, label, fmt in LINES[target]:
                others = "; ".join(f"{name} {b[key][k]:{fmt}}" for key, name in BASELINES)
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
