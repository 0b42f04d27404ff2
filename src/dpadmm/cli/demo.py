"""``dpadmm demo``: the main job on bundled a9a — DP ADMM sharing vs non-private vs the two baselines."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from . import app
from ._common import base_rate_log_loss, console, elapsed, fmt_prob, output_dir, progress, verdict, write_json
from .vertical import DEMO_DELTA, _check_budget

DEMO_LABEL_EPSILON = 1.0

DEMO_LAM = 1e-3
DEMO_NONPRIVATE_ITERATIONS = 100


def plot_demo(path: Path, dp: dict, nonpriv: dict, baselines: dict, *, epsilon: str, delta: float, rho: float,
              lam: float, party_sizes) -> None:
    """Two panels over the DP run's iterations (1..T): training objective and test log loss.

    The non-private run is drawn over the same iterations, and its value after all its
    iterations as a dotted line, so the short DP run is not squeezed into a long axis.
    """
    from ..experiments._plotting import legend_outside, plt, save

    pyplot = plt()
    T = len(dp["history"]["objective"])
    it = list(range(1, T + 1))
    n_np = len(nonpriv["history"]["objective"])
    fig, axes = pyplot.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, label in ((axes[0], "objective", "training objective (mean log loss + λ/2‖x‖²)"),
                           (axes[1], "test_log_loss", "test log loss")):
        ax.plot(it, dp["history"][key], marker="o", ms=4, color="C0", label=f"private ({epsilon})")
        ax.plot(it, nonpriv["history"][key][:T], marker="s", ms=3, color="C1", label="ADMM sharing, non-private")
        ax.axhline(nonpriv["history"][key][-1], color="C1", ls=":", lw=1.2,
                   label=f"non-private after {n_np} iterations")
        ax.set(xlabel="iteration", ylabel=label, xlim=(0.5, T + 0.5))
        ax.set_xticks(it if T <= 20 else None)
        ax.grid(alpha=0.3)
    axes[1].axhline(baselines["sklearn all features"], color="black", ls="--", lw=1,
                    label="scikit-learn, all features (pooled)")
    axes[1].axhline(baselines["label party alone"], color="gray", ls="-.", lw=1.2, label="label party alone")
    axes[0].set_title("training objective")
    axes[1].set_title("test log loss")
    handles, labels = axes[1].get_legend_handles_labels()
    legend_outside(axes[1])
    fig.suptitle(f"a9a, 2 parties {tuple(party_sizes)} (rows normalised per party), λ = {lam:g}; "
                 f"private run: {epsilon}, δ = {fmt_prob(delta)}, T = {T}, ρ = {rho:g}", fontsize=10)
    fig.tight_layout()
    save(fig, path)


@app.command()
def demo(
    out: Path = typer.Option(Path("dpadmm-demo"), help="Output directory."),
    label_epsilon: float = typer.Option(DEMO_LABEL_EPSILON, help="Label-side total ε of the private run (protects "
                                        "the training labels from the passive party)."),
    epsilon: Optional[float] = typer.Option(None, help="Feature-side total ε (default: features not protected)."),
    delta: float = typer.Option(DEMO_DELTA, help="δ of each side (the probability that the ε bound may fail)."),
    iterations: Optional[int] = typer.Option(None, help="Rounds of the private run (default 3)."),
    seed: Optional[int] = typer.Option(None, help="Seed for a reproducible simulation (default: party-local noise)."),
    quiet: bool = typer.Option(False, help="No progress bar."),
):
    """Bundled a9a, 2 parties (66 label-party columns / 57): label-private ADMM sharing vs non-private vs baselines."""
    from rich.table import Table

    from ..experiments.vertical import load_vertical_data, normalized, run_vertical, sklearn_baseline
    from .._validation import check_int
    from .vertical import _privacy_line

    from .._validation import check_positive

    _check_budget(epsilon, delta, None, None)
    check_positive("label_epsilon", label_epsilon)
    if iterations is not None:
        check_int("iterations", iterations)
    iterations = iterations or 3
    what = f"label ε = {label_epsilon:g}" + (f", feature ε = {epsilon:g}" if epsilon is not None else "")
    data = normalized(load_vertical_data(bundled=True))
    lam = DEMO_LAM
    with output_dir(out) as stage:
        with progress(iterations, f"private ({what})", enabled=not quiet) as cb:
            _, dp = run_vertical(data, lam=lam, iterations=iterations, epsilon=epsilon, delta=delta,
                                 label_epsilon=label_epsilon, seed=seed, callbacks=[cb],
                                 monitor=True)  # a simulation: the curve is shown
        with progress(DEMO_NONPRIVATE_ITERATIONS, "non-private ADMM", enabled=not quiet) as cb:
            _, nonpriv = run_vertical(data, lam=lam, iterations=DEMO_NONPRIVATE_ITERATIONS, tol=0.0, seed=seed,
                                      callbacks=[cb])
        allf = sklearn_baseline(data.train, data.y, data.test, data.y_test, lam=lam)
        alone = sklearn_baseline(data.train[:1], data.y, data.test[:1], data.y_test, lam=lam)
        trivial = base_rate_log_loss(data.y, data.y_test)
        table = Table(title=f"a9a, 2 parties {data.party_sizes}, rows normalised per party, λ={lam:g}")
        for col in ("model", "test log loss", "accuracy", "AUC", "privacy"):
            table.add_column(col)
        lab = dp["privacy"]["label"]
        feat = dp["privacy"]["epsilon"]
        rows = [
            (f"private ADMM sharing (T={iterations}, ρ={dp['config']['rho']:g})", dp["final"],
             f"labels: ε = {lab['epsilon']:.4g}; features: "
             + (f"ε = {feat:.4g}" if not isinstance(feat, str) else "not protected") + f"; δ = {fmt_prob(delta)}"),
            (f"ADMM sharing, non-private (T={DEMO_NONPRIVATE_ITERATIONS})", nonpriv["final"],
             "none: every party can read the training labels"),
            ("scikit-learn, all features (centralised)", {k[5:]: v for k, v in allf.items() if k.startswith("test_")},
             "none (pooled data)"),
            ("scikit-learn, label party alone", {k[5:]: v for k, v in alone.items() if k.startswith("test_")},
             "none (own data only)"),
        ]
        for name, f, priv in rows:
            ll = f.get("test_log_loss", f.get("log_loss"))
            acc = f.get("test_accuracy", f.get("accuracy"))
            auc = f.get("test_auc", f.get("auc"))
            table.add_row(name, f"{ll:.4f}", f"{acc:.4f}", f"{auc:.4f}", priv)
        table.add_row("predict the base rate (trivial)", f"{trivial:.4f}", "", "0.5000", "")
        console.print(table)
        console.print(f"privacy: {_privacy_line(dp)}")
        v = verdict("DP test log loss", dp["final"].get("test_log_loss"), trivial, "predicting the base rate",
                    "give more budget (--label-epsilon/--epsilon) or fewer iterations.")
        if v:
            console.print(v)
        metrics = dict(dp)
        metrics["baselines"] = {"admm_nonprivate": nonpriv["final"], "sklearn_all_features": allf,
                                "sklearn_label_party_alone": alone, "base_rate_test_log_loss": trivial}
        metrics["config"]["demo"] = True
        metrics["fit_seconds"] = dp["wall_seconds"]
        plot_demo(stage / "convergence.png", dp, nonpriv,
                  {"sklearn all features": allf["test_log_loss"], "label party alone": alone["test_log_loss"]},
                  epsilon=what, delta=delta, rho=dp["config"]["rho"], lam=lam, party_sizes=data.party_sizes)
        metrics["wall_seconds"] = elapsed()
        write_json(stage / "metrics.json", metrics)
    console.print(f"wrote {out}/metrics.json and {out}/convergence.png")
