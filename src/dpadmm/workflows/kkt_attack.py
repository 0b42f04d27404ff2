"""The KKT reconstruction attack on M-ADMM [Zhang, §6.2, App. E] on (a subset of) Adult: its table and its figure
(``dpadmm attack kkt``; the ``zhang-attack`` reproduction repeats it over seeds)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from .._plotting import legend_outside, plt, save
from ..attacks import run_kkt_attack
from ..exceptions import InvalidParameterError
from .consensus import PAPER_C, PAPER_REG_WEIGHT, THETA, load_data


def attack_table(*, nodes=5, topology="ring", node=0, samples=2000, C=PAPER_C, reg_weight=PAPER_REG_WEIGHT, theta=THETA,
                 eta=0.55, eta_growth=1.1, alpha=3.0, alpha_growth=1.0, iterations=100, seed=0) -> list[dict]:
    """The three scenarios of :func:`dpadmm.attacks.run_kkt_attack` on (a subset of) Adult, as dicts."""
    if samples and samples < 2 * nodes:
        raise InvalidParameterError(f"samples must be at least 2 per node ({2 * nodes}), got samples={samples}.")
    X, y = load_data("adult", samples=samples, seed=seed)
    res = run_kkt_attack(X, y, n_nodes=nodes, topology=topology, node=node, C=C, reg_weight=reg_weight, theta=theta,
                         eta=eta, eta_growth=eta_growth, alpha=alpha, alpha_growth=alpha_growth, iterations=iterations,
                         random_state=seed)
    return [r.to_dict() for r in res]


def plot_attack(path: Path, rows: list[dict], scen: list[str], R: int, *, samples: int, iterations: int,
                 graph: str = "5-node ring") -> None:
    """Mean |cos| per scenario with min–max error bars over seeds, beside the chance level."""
    pyplot = plt()

    def stats(key, s):
        v = np.array([r[key] for r in rows if r["scenario"] == s], dtype=float)
        return v.mean(), v.mean() - v.min(), v.max() - v.mean()

    cos = np.array([stats("cosine", s) for s in scen])
    ch = np.array([stats("chance_q95", s) for s in scen])
    fig, ax = pyplot.subplots(figsize=(8.5, 3.8))
    xs = np.arange(len(scen))
    ax.bar(xs - 0.2, cos[:, 0], 0.4, yerr=cos[:, 1:].T, capsize=4, color="C3",
           label="attack: |cos(x̂, x₁)| " + (f"(mean, min–max over {R} seeds)" if R > 1 else "(1 seed)"))
    ax.bar(xs + 0.2, ch[:, 0], 0.4, yerr=ch[:, 1:].T, capsize=4, color="C7",
           label="chance: 95th percentile of |cos| with the other training points")
    ax.set_xticks(xs, [textwrap.fill(s, 22) for s in scen], fontsize=8)
    ax.set(ylim=(0, 1.05), ylabel="|cosine| between the reconstruction\nand the true point (1 = exact)",
           title=f"KKT reconstruction [Zhang, App. E]: Adult ({samples:,} rows), {graph}, T = {iterations}")
    ax.grid(alpha=0.3, axis="y")
    legend_outside(ax, where="below", ncol=1)
    fig.tight_layout()
    save(fig, path, dpi=110)
