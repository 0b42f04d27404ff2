"""``dpadmm demo``: the main job on bundled a9a — DP ADMM sharing vs non-private vs the two baselines."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

import typer

from ._app import app
from .._jsonio import write_json
from ._common import console, elapsed, fmt_prob, output_dir
from ..workflows.baselines import base_rate_log_loss, verdict
from ._display import phase, progress
from ._vertical_options import check_budget
from .vertical import DEMO_DELTA

DEMO_LAM = 1e-3
DEMO_NONPRIVATE_ITERATIONS = 100


DEMO_LABEL_EPSILON = 1.0


def plot_demo(path: Path, private_runs: dict, nonpriv: dict, baselines: dict, *, title: str) -> None:
    """Two panels over the private runs' iterations: training objective and test log loss.

    The non-private run is drawn over the same iterations and its value after all its
    iterations as a dotted line, so short private runs are not squeezed into a long axis.
    """
    from .._plotting import legend_outside, plt, save

    pyplot = plt()
    T = max(len(m["history"].get("objective", [])) for m in private_runs.values())
    T = max(T, 2)
    n_np = len(nonpriv["history"]["objective"])
    fig, axes = pyplot.subplots(1, 2, figsize=(11.5, 4.2))
    for ax, key, label in ((axes[0], "objective", "training objective (mean log loss + λ/2‖x‖²)"),
                           (axes[1], "test_log_loss", "test log loss")):
        for j, (name, m) in enumerate(private_runs.items()):
            h = m["history"].get(key)
            if h:
                ax.plot(range(1, len(h) + 1), h, marker="o^"[j % 2], ms=4, color=f"C{2 * j}", label=name)
        ax.plot(range(1, min(T, n_np) + 1), nonpriv["history"][key][:T], marker="s", ms=3, color="C1",
                label="ADMM sharing, non-private")
        ax.axhline(nonpriv["history"][key][-1], color="C1", ls=":", lw=1.2, label=f"non-private after {n_np} iterations")
        ax.set(xlabel="iteration", ylabel=label, xlim=(0.5, T + 0.5))
        if T <= 20:
            ax.set_xticks(range(1, T + 1))
        ax.grid(alpha=0.3)
    for name, (v, style) in baselines.items():
        axes[1].axhline(v, color=style[0], ls=style[1], lw=1.2, label=name)
    for ax in axes:  # keep the informative range visible when a run is far off (its value is in the table)
        lo = min(float(np.min(np.asarray(line.get_ydata(), dtype=float))) for line in ax.get_lines())
        ax.set_ylim(lo - 0.02, min(ax.get_ylim()[1], 1.0))
    # the released model after the last round (it can differ from the last monitored round, e.g. after
    # the label party's refit): one marker per private run at "final"; off-scale values are written out
    for ax, key in ((axes[0], "train_objective"), (axes[1], "test_log_loss")):
        top = ax.get_ylim()[1]
        for j, m in enumerate(private_runs.values()):
            v = m["final"].get(key)
            if v is None:
                continue
            if v <= top:
                ax.plot([T + 1], [v], marker="*", ms=11, color=f"C{2 * j}", ls="none")
            else:
                ax.annotate(f"{v:.2f} ↑", xy=(T + 1, top), xytext=(T + 1, top - 0.04 * (j + 1) * (top - ax.get_ylim()[0])),
                            color=f"C{2 * j}", ha="center", fontsize=8, arrowprops=dict(arrowstyle="->", color=f"C{2 * j}"))
        ax.set_xlim(0.5, T + 1.5)
        ax.set_xticks(list(range(1, T + 1)) + [T + 1], [str(t) for t in range(1, T + 1)] + ["final"])
    axes[0].set_title("training objective (★ = released model)")
    axes[1].set_title("test log loss (★ = released model; off-scale values written out)")
    legend_outside(axes[1])
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save(fig, path)


def _print_table(data, lam, delta, epsilon, private: dict, nonpriv: dict, allf: dict, alone: dict,
                 trivial: float) -> None:
    """The demo's table: each private run, the non-private ADMM, the pooled and label-party-alone baselines and the
    base rate."""
    from rich.table import Table

    table = Table(title=f"a9a, 2 parties {data.party_sizes}, rows normalised per party, λ={lam:g}, δ={fmt_prob(delta)}")
    for col in ("model", "test log loss", "accuracy", "AUC", "privacy"):
        table.add_column(col)
    rows = []
    for name, m in private.items():
        f = m["final"]
        rows.append((f"private, {name} (T={f['iterations']})", f,
                     "labels + features" if epsilon else "labels; features visible"))
    rows += [
        (f"ADMM sharing, non-private (T={DEMO_NONPRIVATE_ITERATIONS})", nonpriv["final"],
         "none: every party can read the labels"),
        ("scikit-learn, all features (centralised)", {k[5:]: v for k, v in allf.items() if k.startswith("test_")},
         "none (pooled data)"),
        ("label party alone (own columns standardised)", {k[5:]: v for k, v in alone.items() if k.startswith("test_")},
         "none (own data only)"),
    ]
    for name, f, priv in rows:
        ll = f.get("test_log_loss", f.get("log_loss"))
        acc = f.get("test_accuracy", f.get("accuracy"))
        auc = f.get("test_auc", f.get("auc"))
        table.add_row(name, f"{ll:.4f}", f"{acc:.4f}", f"{auc:.4f}", priv)
    table.add_row("predict the base rate (trivial)", f"{trivial:.4f}", "", "0.5000", "")
    console.print(table)


@app.command()
def demo(
    out: Path = typer.Option(Path("dpadmm-demo"), help="Output directory."),
    label_epsilon: float = typer.Option(DEMO_LABEL_EPSILON, help="Label-side total ε of the private run."),
    epsilon: Optional[float] = typer.Option(None, help="Feature-side total ε per party (default: features not "
                                                       "protected; a9a needs a very large ε here, see the verdict)."),
    delta: float = typer.Option(DEMO_DELTA, help="δ of each side (the probability that the ε bound may fail)."),
    seed: Optional[int] = typer.Option(None, help="Seed for a reproducible simulation (default: party-local noise)."),
    quiet: bool = typer.Option(False, help="No progress bar."),
):
    """Bundled a9a, 2 parties (66 label-party columns / 57): label-private ADMM sharing vs non-private vs baselines.

    The private run protects the labels (--label-epsilon) and, with --epsilon, each party's features
    too. A verdict line flags a model that is worse than predicting the base rate.
    """
    from ..data.vertical import load_vertical_data, normalized
    from ..workflows.vertical import run_vertical, sklearn_baseline, vertical_baselines
    from ._vertical_report import _privacy_line

    from .._validation import check_positive

    check_budget(epsilon, delta, None, None)
    check_positive("label_epsilon", label_epsilon)
    phase("loading the bundled a9a")
    raw = load_vertical_data(bundled=True)
    data = normalized(raw)
    lam = DEMO_LAM
    runs = {f"labels ε={label_epsilon:g}" + (f" + features ε={epsilon:g}" if epsilon else " (features visible)"):
            dict(epsilon=epsilon, label_epsilon=label_epsilon)}
    with output_dir(out) as stage:
        private = {}
        for name, kw in runs.items():
            with progress(10, f"DP ADMM ({name})", enabled=not quiet) as cb:
                _, private[name] = run_vertical(data, lam=lam, delta=delta, seed=seed, callbacks=[cb], monitor=True,
                                                **kw)  # a simulation: the curves are shown
        with progress(DEMO_NONPRIVATE_ITERATIONS, "non-private ADMM", enabled=not quiet) as cb:
            _, nonpriv = run_vertical(data, lam=lam, iterations=DEMO_NONPRIVATE_ITERATIONS, tol=0.0, seed=seed,
                                      callbacks=[cb])
        phase("baselines: all columns in one place, the label party alone")
        allf = sklearn_baseline(data.train, data.y, data.test, data.y_test, lam=lam)
        # the one "label party alone" of a data set: its raw columns, its own standardisation (as `vertical` reports)
        alone = vertical_baselines(data, lam=lam, raw=raw)["label_party_alone"]
        trivial = base_rate_log_loss(data.y, data.y_test)
        _print_table(data, lam, delta, epsilon, private, nonpriv, allf, alone, trivial)
        verdicts = {}
        for name, m in private.items():
            console.print(f"privacy of '{name}': {_privacy_line(m)}")
            v = verdict(f"'{name}': test log loss", m["final"].get("test_log_loss"), trivial,
                        "predicting the base rate", "the budget is too small for this data; give more --epsilon / "
                        "--label-epsilon (see docs/algorithms.md §1).")
            verdicts[name] = v
            if v:
                console.print(v)
        first = next(iter(private.values()))
        metrics = dict(first)
        metrics["private_runs"] = private
        metrics["verdicts"] = verdicts
        metrics["baselines"] = {"admm_nonprivate": nonpriv["final"], "sklearn_all_features": allf,
                                "sklearn_label_party_alone": alone, "base_rate_test_log_loss": trivial}
        metrics["config"] = dict(metrics["config"], demo=True, label_epsilon=label_epsilon)
        plot_demo(stage / "convergence.png", private, nonpriv,
                  {"scikit-learn, all features (pooled)": (allf["test_log_loss"], ("black", "--")),
                   "label party alone": (alone["test_log_loss"], ("gray", "-."))},
                  title=f"a9a, 2 parties {tuple(data.party_sizes)} (rows normalised per party), λ = {lam:g}, "
                        f"δ = {fmt_prob(delta)} per side")
        metrics["wall_seconds"] = elapsed()
        write_json(stage / "metrics.json", metrics)
    console.print(f"wrote {out}/metrics.json and {out}/convergence.png")
