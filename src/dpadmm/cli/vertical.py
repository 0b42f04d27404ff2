"""``dpadmm vertical`` and ``dpadmm demo``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from . import app
from . import _backend as bk
from ._common import console, output_dir, progress, write_json
from ..exceptions import InvalidParameterError, PrivacyPreconditionError

DEMO_LABEL_EPSILON = 1.0
DEMO_DELTA = 1e-5


def _check_budget(epsilon, delta, noise_scale, iteration_epsilon):
    from .._validation import check_open_unit, check_positive

    given = [n for n, v in (("--epsilon", epsilon), ("--iteration-epsilon", iteration_epsilon),
                            ("--noise-scale", noise_scale)) if v is not None]
    if len(given) > 1:
        raise InvalidParameterError(f"give only one of --epsilon, --iteration-epsilon, --noise-scale; got {', '.join(given)}.")
    if epsilon is not None:
        check_positive("epsilon", epsilon)
    if iteration_epsilon is not None:
        check_positive("iteration_epsilon", iteration_epsilon)
    if noise_scale is not None:
        check_positive("noise_scale", noise_scale, allow_zero=True)
    check_open_unit("delta", delta)


def _plot_convergence(path: Path, curves: dict, baselines: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for label, h in curves.items():
        it = range(1, len(h["objective"]) + 1)
        axes[0].plot(it, h["objective"], label=label)
        if "test_log_loss" in h:
            axes[1].plot(it, h["test_log_loss"], label=label)
    for label, v in baselines.items():
        axes[1].axhline(v, ls="--", lw=1, label=label, color="gray" if "alone" in label else "black")
    axes[0].set(xlabel="iteration", ylabel="training objective", title="training objective", yscale="log")
    axes[1].set(xlabel="iteration", ylabel="test log loss", title="test log loss")
    for ax in axes:
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _fmt(e) -> str:
    return "inf" if e in (None, "inf") or (isinstance(e, float) and math.isinf(e)) else f"{e:.4g}"


def _privacy_line(metrics) -> str:
    """Both sides, each with its relation; says plainly when labels are readable."""
    p = metrics["privacy"]
    label = p.get("label") or {}
    if p.get("mechanism", "").startswith("[Hu, eq. 16]"):
        feat = ("features: epsilon = inf -- [Hu, eq. 16] as published is not differentially private "
                "(its noise lies in range(D_m)); kept to reproduce the paper")
    elif p.get("private"):
        C = ", ".join(f"{r['party']}: C={r['sensitivity']:.4g} sigma={r['sigma']:.4g}"
                      for r in p.get("releases", []) if r.get("side") == "features")
        feat = (f"features: epsilon={_fmt(p['epsilon'])} at delta={p['delta']:.2g} ({p['accountant']}, "
                f"relation: {p['relation']}; {C})")
    else:
        feat = "features: not protected (epsilon = inf)"
    if label.get("protected"):
        lab = (f"labels: epsilon={_fmt(label['epsilon'])} at delta={label['delta']:.2g} ({label['accountant']}, "
               f"relation: one label changes; C={label['sensitivity']:.4g} sigma={label['sigma']:.4g})")
    else:
        lab = "labels: NOT protected -- every party can read the training labels (use --label-epsilon)"
    return f"{feat}\n  {lab}"


@app.command()
def vertical(
    train: Optional[Path] = typer.Option(None, help="Training LIBSVM file (with --parties)."),
    test: Optional[Path] = typer.Option(None, help="Test LIBSVM file."),
    parties: Optional[str] = typer.Option(None, help="Column counts per party, e.g. 66,57 (first = label party)."),
    party: List[Path] = typer.Option([], "--party", help="Party CSV (repeat, label party first)."),
    test_party: List[Path] = typer.Option([], "--test-party", help="Test party CSV (repeat, same order)."),
    id_column: str = typer.Option("id", help="Id column joining the party files."),
    label_column: str = typer.Option("y", help="Label column (in the first party's file)."),
    data: Optional[str] = typer.Option(None, help="'a9a' for the bundled a9a train/test (parties 66,57 "
                                                   "unless --parties)."),
    lam: float = typer.Option(1e-3, help="Regularisation weight λ (mean-loss scaling)."),
    rho: Optional[float] = typer.Option(None, help="ADMM penalty ρ (paper's summed-loss scaling); default 0.05, "
                                        "or 0.5 with --label-epsilon."),
    iterations: Optional[int] = typer.Option(None, help="Iterations T (default 100, or 3 with --label-epsilon)."),
    no_intercept: bool = typer.Option(False, "--no-intercept", help="Fit without intercept."),
    epsilon: Optional[float] = typer.Option(None, help="Feature-side total ε of the run (turns feature DP on)."),
    mechanism: str = typer.Option("gaussian", help="Feature-side mechanism: gaussian (DP, default) or paper "
                                  "([Hu, eq. 16], not DP: reported as epsilon = inf; for reproduction)."),
    relation: str = typer.Option("feature_column", help="Feature-side relation: feature_column or record."),
    clip: Optional[float] = typer.Option(None, help="Per-sample clip scale c of what a party receives "
                                         "(V = c·sqrt(N)); default auto."),
    label_epsilon: Optional[float] = typer.Option(None, help="Label-side total ε: every message the coordinator "
                                                  "sends is (ε, δ)-DP w.r.t. one label (turns label DP on)."),
    delta: float = typer.Option(1e-5, help="δ of the total budget (per iteration with --iteration-epsilon)."),
    iteration_epsilon: Optional[float] = typer.Option(None, help="Per-iteration ε of [Hu, Thm 3] instead of a total."),
    noise_scale: Optional[float] = typer.Option(None, help="Raw noise σ instead of a budget."),
    bound: Optional[float] = typer.Option(None, help="b1 of [Hu, Assumption 2.1] for x, y, z (default: "
                                          "sqrt(2 ln2/λ) for x, 3·sqrt(N) for y and z)."),
    normalize_rows: bool = typer.Option(False, "--normalize-rows", help="Scale each party's rows to unit norm (needed for DP)."),
    adaptive_rho: bool = typer.Option(False, help="Residual-balancing ρ (beyond the paper)."),
    accountant: str = typer.Option("pld", help="pld or rdp."),
    seed: int = typer.Option(0, help="Root random seed."),
    out: Optional[Path] = typer.Option(None, help="Write metrics.json and convergence.png here."),
    quiet: bool = typer.Option(False, help="No progress bar."),
    backend: str = bk.backend_option(),
    ray_address: Optional[str] = bk.ray_address_option(),
    ray_resources: Optional[str] = bk.ray_resources_option(),
    timeout: float = bk.timeout_option(),
    transcript: Optional[Path] = bk.transcript_option(),
    checkpoint_every: Optional[int] = bk.checkpoint_every_option(),
    resume: Optional[Path] = bk.resume_option(),
):
    """Train logistic regression on vertically partitioned data with (DP) ADMM sharing [Hu]."""
    from ..experiments.vertical import load_vertical_data, normalized, rows_are_normalized, run_vertical
    from .._validation import check_int, check_positive

    from .._validation import check_choice

    check_positive("lam", lam)
    if rho is not None:
        check_positive("rho", rho)
    if iterations is not None:
        check_int("iterations", iterations)
    _check_budget(epsilon, delta, noise_scale, iteration_epsilon)
    check_choice("mechanism", mechanism, ("gaussian", "paper"))
    check_choice("relation", relation, ("feature_column", "record"))
    if clip is not None:
        check_positive("clip", clip)
    if label_epsilon is not None:
        check_positive("label_epsilon", label_epsilon)
    if bound is not None:
        check_positive("bound", bound)
    for p in [train, test, *party, *test_party]:
        if p is not None and not Path(p).is_file():
            from ..exceptions import DataFileError

            raise DataFileError(f"file not found: {p}; check the path.")
    run_opts = bk.run_options(backend=backend, ray_address=ray_address, ray_resources=ray_resources, timeout=timeout,
                              transcript=transcript, checkpoint_every=checkpoint_every, resume=resume, out=out)
    private = any(v is not None for v in (epsilon, iteration_epsilon, noise_scale)) and mechanism == "paper"
    if party and backend != "inprocess":
        # data locality: each party's worker reads its own --party file; unit-norm rows are checked there
        if train is not None:
            raise InvalidParameterError("give either --train (LIBSVM) or --party files, not both.")
        from ..experiments.vertical import load_vertical_sources

        data = load_vertical_sources(party, test_party, id_column=id_column, label_column=label_column,
                                     normalize=normalize_rows)
    elif data is not None:
        if data != "a9a":
            raise InvalidParameterError(f"--data must be 'a9a' (bundled), got --data={data!r}; "
                                        "use --train/--party for your own files.")
        if train is not None or party:
            raise InvalidParameterError("give either --data a9a or --train/--party files, not both.")
        data = load_vertical_data(bundled=True, parties=parties)
    else:
        data = load_vertical_data(train=train, test=test, parties=parties, party_files=party,
                                  test_party_files=test_party, id_column=id_column, label_column=label_column)
    if data.source.get("data_locality"):
        pass  # rows are normalised (and, under DP, checked) by each party's worker
    elif normalize_rows:
        data = normalized(data)
    elif private and not rows_are_normalized(data.train):
        raise PrivacyPreconditionError("--mechanism paper needs unit-norm rows in every party block "
                                       "[Hu, Assumption 2.3]; pass --normalize-rows.")
    with output_dir(out) as stage:
        rounds = iterations if iterations is not None else (3 if label_epsilon is not None else 100)
        with progress(rounds, "vertical ADMM", enabled=not quiet) as cb:
            model, metrics = run_vertical(data, lam=lam, rho=rho if rho is not None else "auto", iterations=rounds,
                                          fit_intercept=not no_intercept,
                                          epsilon=epsilon, delta=delta, iteration_epsilon=iteration_epsilon,
                                          noise_scale=noise_scale, bound=bound if bound is not None else "auto",
                                          accountant=accountant, adaptive_rho=adaptive_rho, seed=seed, callbacks=[cb],
                                          backend=run_opts.backend, fit_kwargs=run_opts.begin(), mechanism=mechanism,
                                          relation=relation, clip=clip if clip is not None else "auto",
                                          label_epsilon=label_epsilon)
        metrics["config"]["normalize_rows"] = normalize_rows
        extra = bk.run_metrics(run_opts)
        metrics["config"].update({k: v for k, v in extra.items() if k != "transcript"})
        if "transcript" in extra:
            metrics["transcript"] = extra["transcript"]
        f = metrics["final"]
        console.print(f"iterations: {f['iterations']}  training objective: {f['train_objective']:.6f}"
                      + (f"  test log loss: {f['test_log_loss']:.4f}  accuracy: {f['test_accuracy']:.4f}  "
                         f"AUC: {f['test_auc']:.4f}" if "test_log_loss" in f else ""))
        console.print(f"privacy: {_privacy_line(metrics)}")
        if out is not None:
            write_json(stage / "metrics.json", metrics)
            _plot_convergence(stage / "convergence.png", {"ADMM": metrics["history"]}, {})
    if out is not None:
        console.print(f"wrote {out}/metrics.json and convergence.png")


@app.command()
def demo(
    out: Path = typer.Option(Path("dpadmm-demo"), help="Output directory."),
    label_epsilon: float = typer.Option(DEMO_LABEL_EPSILON, help="Label-side total ε of the private run."),
    epsilon: Optional[float] = typer.Option(None, help="Feature-side total ε (default: features not protected)."),
    delta: float = typer.Option(DEMO_DELTA, help="δ of each side's total."),
    seed: int = typer.Option(0, help="Root random seed."),
    quiet: bool = typer.Option(False, help="No progress bar."),
):
    """Bundled a9a, 2 parties (66 label-party columns / 57): label-private ADMM sharing vs non-private vs baselines."""
    from ..experiments.vertical import load_vertical_data, normalized, run_vertical, sklearn_baseline

    _check_budget(epsilon, delta, None, None)
    from .._validation import check_positive

    check_positive("label_epsilon", label_epsilon)
    data = normalized(load_vertical_data(bundled=True))
    lam = 1e-3
    with output_dir(out) as stage:
        with progress(3, f"label-private protocol (label ε={label_epsilon:g})", enabled=not quiet) as cb:
            _, dp = run_vertical(data, lam=lam, epsilon=epsilon, delta=delta, label_epsilon=label_epsilon,
                                 seed=seed, callbacks=[cb])
        with progress(100, "non-private ADMM", enabled=not quiet) as cb:
            _, nonpriv = run_vertical(data, lam=lam, iterations=100, tol=0.0, seed=seed, callbacks=[cb])
        allf = sklearn_baseline(data.train, data.y, data.test, data.y_test, lam=lam)
        alone = sklearn_baseline(data.train[:1], data.y, data.test[:1], data.y_test, lam=lam)
        table = Table(title=f"a9a, 2 parties {data.party_sizes}, rows normalised per party, λ={lam:g}")
        for col in ("model", "test log loss", "accuracy", "AUC", "privacy"):
            table.add_column(col)
        rows = [
            (f"private ADMM sharing (label ε={label_epsilon:g}"
             + (f", feature ε={epsilon:g})" if epsilon else ")"), dp["final"], _privacy_line(dp)),
            ("ADMM sharing, non-private", nonpriv["final"], "none: every party can read the training labels"),
            ("scikit-learn, all features (centralised)", {k[5:]: v for k, v in allf.items() if k.startswith("test_")}, "none (pooled data)"),
            ("scikit-learn, label party alone", {k[5:]: v for k, v in alone.items() if k.startswith("test_")}, "none (own data only)"),
        ]
        for name, f, priv in rows:
            ll = f.get("test_log_loss", f.get("log_loss"))
            acc = f.get("test_accuracy", f.get("accuracy"))
            auc = f.get("test_auc", f.get("auc"))
            table.add_row(name, f"{ll:.4f}", f"{acc:.4f}", f"{auc:.4f}", priv)
        console.print(table)
        metrics = dict(dp)
        metrics["baselines"] = {"admm_nonprivate": nonpriv["final"], "sklearn_all_features": allf,
                                "sklearn_label_party_alone": alone}
        metrics["config"]["demo"] = True
        write_json(stage / "metrics.json", metrics)
        _plot_convergence(stage / "convergence.png",
                          {f"private (label ε={label_epsilon:g})": dp["history"], "ADMM non-private": nonpriv["history"]},
                          {"sklearn all features": allf["test_log_loss"], "label party alone": alone["test_log_loss"]})
    console.print(f"wrote {out}/metrics.json and {out}/convergence.png")
