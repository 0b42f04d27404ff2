"""Consensus figures and files ([Zhang, Fig. 2–4]'s layout): loss and privacy curves with range bars, their CSV, and one run's dump."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from .._jsonio import write_json
from .._plotting import legend_outside, plt, readable_log, save


# ----------------------------------------------------------------------------- plotting / files
def plot_curves(path: Path, curves: dict[str, dict], *, title: str = "", bars: int = 10) -> None:
    """Mean L(t) with range bars (min–max over runs) as in [Zhang, Fig. 2–4], and P(t) beside it.

    The privacy panel is drawn only if some curve has a finite bound (no empty panel for
    non-private runs). Curves get distinct line styles and markers (placed at staggered
    iterations), so curves that coincide remain distinguishable; the legend sits outside the data.
    """
    import textwrap

    pyplot = plt()
    private = any(any(v is not None and np.isfinite(v) for v in h.get("privacy_bound", [])) for h in curves.values())
    compare = not private and len(curves) > 1  # second panel: differences to the first curve (they may coincide)
    fig, axes = pyplot.subplots(1, 2 if (private or compare) else 1,
                                figsize=(12.5, 4.2) if (private or compare) else (8.5, 4.2), squeeze=False)
    first = None
    axes = axes[0]
    styles = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)))
    markers = ("o", "s", "^", "D", "v", "P", "X", "*")
    n = len(curves)
    for j, (label, h) in enumerate(curves.items()):
        tl = h["train_loss"]
        mean, lo, hi = (np.asarray(tl[k]) for k in ("mean", "min", "max")) if isinstance(tl, dict) else (np.asarray(tl),) * 3
        it = np.arange(1, mean.size + 1)
        colour = next((c for c in ("blue", "red", "black", "magenta") if f"({c})" in label), None)  # the paper's colours
        every = max(1, mean.size // bars)
        start = (j * max(1, every // max(n, 1))) % every  # stagger markers of coinciding curves
        line, = axes[0].plot(it, mean, label=label, color=colour, ls=styles[j % len(styles)],
                             marker=markers[j % len(markers)], markevery=(start, every), ms=5, lw=1.6, alpha=0.9)
        if np.any(hi > lo):
            axes[0].errorbar(it[start::every], mean[start::every],
                             yerr=[mean[start::every] - lo[start::every], hi[start::every] - mean[start::every]],
                             fmt="none", ecolor=line.get_color(), capsize=2, lw=1)
        if first is None:
            first = (label, mean)
        elif compare:
            m = min(mean.size, first[1].size)
            axes[1].plot(it[:m], mean[:m] - first[1][:m], label=label, color=line.get_color(), ls=line.get_linestyle(),
                         marker=markers[j % len(markers)], markevery=(start, every), ms=5)
        pb = np.array([np.nan if v is None else v for v in h.get("privacy_bound", [])], dtype=float)
        if private and pb.size and np.isfinite(pb).any():
            axes[1].plot(np.arange(1, pb.size + 1), pb, label=label, color=line.get_color(), ls=line.get_linestyle(),
                         marker=markers[j % len(markers)], markevery=(start, every), ms=5)
    axes[0].set(xlabel="iteration t", ylabel="average training loss L(t)", title="average training loss (mean, min–max bars)")
    readable_log(axes[0], "y")
    if private:
        axes[1].set(xlabel="iteration t", ylabel="P(t): total ε [Zhang, Thm 4.1]", title="privacy bound (pure DP)")
        readable_log(axes[1], "y")
    elif compare:
        axes[1].axhline(0.0, color="gray", lw=1)
        axes[1].set(xlabel="iteration t", ylabel=f"L(t) − L(t) of '{first[0]}'",
                    title=f"difference to '{textwrap.shorten(first[0], 40)}'")
        axes[1].ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    for ax in axes:
        ax.grid(alpha=0.3, which="both")
    legend_outside(axes[-1])
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save(fig, path, dpi=110)


def write_curves_csv(path: Path, curves: dict[str, dict]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["label", "iteration", "train_loss_mean", "train_loss_min", "train_loss_max", "privacy_bound"])
        for label, h in curves.items():
            tl = h["train_loss"]
            for t, (m, lo, hi) in enumerate(zip(tl["mean"], tl["min"], tl["max"]), start=1):
                pb = h["privacy_bound"][t - 1]
                w.writerow([label, t, m, lo, hi, "inf" if pb is None else pb])


def dump_curves(out: Path, name: str, results: dict[str, dict], title: str) -> None:
    plot_curves(out / f"{name}.png", {k: v["history"] for k, v in results.items()}, title=title)
    write_curves_csv(out / f"{name}.csv", {k: v["history"] for k, v in results.items()})
    write_json(out / f"{name}.json", results)


