"""Reproductions of [Zhou, §5]: Tables 1–6 (MISE) and Figures 1–6 (empirical loss / augmented objective).

Choices the paper leaves open (documented here, exposed as module constants):

- K = 6 FPCA components (from the sum of the workers' covariance matrices — equal to pooled FPCA;
  not privatised, as in the paper; ``total_epsilon`` therefore covers the ADMM iterations);
- observation grid: 100 equispaced points on [0, 1] (the grid on which the paper evaluates the MISE);
- L: 50 rounds for the ``fast`` method used for ``ours_mise``; 300 for the published method in the figures;
- c_1: scores clipped to ‖A_ij‖ ≤ 4 (standardised scores, ``fast``) or 3 (raw scores, ``paper``);
- c_w = 1 (‖w*‖ ≈ 1.17 for the truncated truth), c_2 = 1 (‖P'‖∞ for ℓ1), ρ = 0.1, λ = 0.05 as in the paper.

Batching: one repetition = one data set; all its (τ, privacy) settings (5 × 21 = 105 for a table)
and all M workers run as one 'virtual party' (iterates of shape (1, M, S, K)) through ``engine.run``.
The MISE of β̂ is ``∫(β̂ − β)²`` by the trapezoid rule on the 100-point grid. The centralised
floor is statsmodels QuantReg (unpenalised, non-private) on the same scores, on the first
``FLOOR_REPS`` repetitions.
"""

from __future__ import annotations

import gzip
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from .registry import register
from .. import engine
from ..algorithms.functional import hub as functional_hub, messages as functional_messages, rules as functional_rules
from ..backends import PartySpec, get_backend
from ..data.functional import simulate_zhou_scores, t3_quantile, zhou_basis, zhou_coefficients, zhou_grid
from ..kernels import fpca as F
from ..algorithms.functional.protocol import SCORES_PROTOCOL
from ..algorithms.functional.report import iteration_noise_multiplier, paper_bound, total_epsilon
from .._progress import task
from .._plotting import legend_outside, readable_log

K_DEFAULT = 6
GRID_SIZE = 100
N_PAPER = 100_000
RHO = 0.1
LAM = 0.05
C_W = 1.0
C_2 = 1.0
TAUS = (0.1, 0.25, 0.5, 0.75, 0.9)
TABLES = {1: ("l1", 10), 2: ("l1", 20), 3: ("l1", 50), 4: ("l2", 10), 5: ("l2", 20), 6: ("l2", 50)}
FLOOR_REPS = 3
TABLE_ROUNDS = 50  # rounds of the ``fast`` method in the tables (the estimator's default is longer)


def method_config(method: str) -> dict:
    """The method presets of the reproductions: ``fast`` here is the linearised step with a *constant*
    step η₀ = 4 on standardised scores and the average of the last half of 50 rounds (what the tables
    were validated with; the simulation's response needs no standardisation). The estimator's ``fast``
    (smoothed loss, shrinking step, 200 rounds) is tuned for accuracy on data in any units instead."""
    cfg = dict(functional_rules.METHODS[method])
    if method == "fast":
        cfg.update(step="constant", eta0=4.0, smooth=(0.0, 1.0, 0.0), iterations=TABLE_ROUNDS)
    return cfg
FIG_LEVELS = ((0.1, 1e-4), (0.2, 1e-4), (0.5, 1e-4), (0.8, 1e-4), (math.inf, 1.0))


def paper_table() -> pd.DataFrame:
    """The 630 published cells (bundled, gzipped copy of the transcription in docs/algorithms.md §3)."""
    from importlib.resources import files

    raw = (files("dpadmm.data") / "_bundled" / "zhou_tables.csv.gz").read_bytes()
    return pd.read_csv(io.StringIO(gzip.decompress(raw).decode()))


@dataclass
class SimRep:
    """One simulated data set after FPCA: scores used by the method, responses without the τ shift."""

    A: np.ndarray  # (n, K) scores as the method uses them (standardised or not), clipped to c1
    y: np.ndarray  # (n,)
    basis: F.Basis
    scale: np.ndarray  # (K,) divide fitted coefficients by this to get raw-score coefficients
    beta: np.ndarray  # (T,) true β on the grid


def simulate_rep(rng: np.random.Generator, n: int, *, K: int = K_DEFAULT, standardize: bool = True,
                 c1: float = 4.0, n_workers: int = 10) -> SimRep:
    """[Zhou, §5] data, distributed FPCA (Σ of per-worker moment sums = pooled), clipped scores."""
    grid = zhou_grid(GRID_SIZE)
    B = zhou_basis(grid)
    w = zhou_coefficients()
    A_true, eps = simulate_zhou_scores(n, rng)
    X = A_true @ B.T
    q = F.trapezoid_weights(grid)
    S = sum(F.moment_sum(X[idx], q) for idx in np.array_split(np.arange(n), n_workers))
    basis = F.fpca_from_moments(S, grid, K)
    scale = np.sqrt(basis.eigenvalues) if standardize else np.ones(K)
    A = F.clip_rows(basis.scores(X) / scale, c1)
    return SimRep(A=A, y=A_true @ w + eps, basis=basis, scale=scale, beta=B @ w)


def make_settings(levels: Sequence[tuple[float, float]], taus: Sequence[float], lam: float = LAM,
                  noise_multipliers: Sequence[float] | None = None) -> tuple[functional_messages.Settings, list[tuple]]:
    """Settings for every (privacy level × τ); y is shifted by −F^{-1}(τ) [Zhou, §5]."""
    keys, tau, z, e, d = [], [], [], [], []
    for i, (eps, delta) in enumerate(levels):
        for t in taus:
            keys.append((eps, delta, t))
            tau.append(t)
            z.append(iteration_noise_multiplier(eps, delta) if noise_multipliers is None else noise_multipliers[i])
            e.append(eps)
            d.append(delta)
    tau = np.array(tau)
    return functional_messages.Settings.make(tau, shift=-t3_quantile(tau), noise_multiplier=z, lam=lam, eps_iter=e, delta_iter=d), keys


def run_settings(rep: SimRep, n_workers: int, settings: functional_messages.Settings, *, penalty: str, method: str = "fast",
                 iterations: int | None = None, seed: int = 0, metrics_every: int | None = None,
                 rho: float = RHO, c1: float | None = None):
    """Run every setting on one data set with all workers in one virtual party; returns
    (raw-score coefficients (S, K), history)."""
    mcfg = method_config(method)
    L = int(iterations or mcfg["iterations"])
    n, K = rep.A.shape
    m = n // n_workers
    perm = np.random.default_rng(seed).permutation(n)[: m * n_workers].reshape(n_workers, m)
    opts = functional_messages.FunctionalOptions(
        rho=rho, n_workers=n_workers, penalty=penalty, local_step=mcfg["local_step"], step=mcfg["step"],
        c1=float(c1 if c1 is not None else mcfg["c1"]), c2=C_2, c_w=C_W, eta0=mcfg["eta0"],
        decay_start=L * (1.0 - mcfg["average_last"]) if mcfg["average_last"] > 0 else math.inf,
        smooth=functional_rules.smooth_schedule(mcfg.get("smooth", (0.0, 1.0, 0.0)), L, mcfg["average_last"]))
    scores = SCORES_PROTOCOL.setup_type  # fq.setup_party's arguments by name
    spec = PartySpec.of(SCORES_PROTOCOL, "workers", scores(name="workers", A=rep.A[perm][None], y=rep.y[perm][None],
                                                           settings=settings, options=opts))
    hub_cfg = functional_messages.HubConfig(rho, ("workers",), (1, settings.size, K), average_last=mcfg["average_last"], rounds=L)
    hub = engine.Hub(hub_cfg, functional_hub.init_hub, functional_hub.hub_step, functional_hub.hub_metrics, metrics_every=metrics_every or L)
    res = engine.run(hub=hub, parties=[spec], backend=get_backend("inprocess"), rounds=L,
                     noise_seed=seed, monitor=metrics_every is not None, stop_on_convergence=False)
    return res.hub_state.output[0] / rep.scale, res.history


def mise(rep: SimRep, w_raw: np.ndarray) -> np.ndarray:
    """∫(β̂ − β)² on the grid (trapezoid), for every row of w_raw."""
    diff = rep.basis.curve(w_raw) - rep.beta
    return (diff * diff * rep.basis.q).sum(-1)


def qr_floor(rep: SimRep, taus: Sequence[float]) -> np.ndarray:
    """MISE of centralised, unpenalised quantile regression (statsmodels QuantReg) on the same scores."""
    import statsmodels.api as sm

    out = []
    for t in taus:
        y = rep.y - float(t3_quantile(t))
        params = sm.QuantReg(y, rep.A).fit(q=t, max_iter=2000).params
        out.append(float(mise(rep, np.asarray(params) / rep.scale)))
    return np.array(out)


def _progress(total: int, desc: str):
    """Progress of a long loop; shown by the CLI (spinner on a terminal, plain lines on a pipe)."""
    return task(total, f"{desc} reps")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# ----------------------------------------------------------------------------- tables
def run_table(number: int, out: Path, *, quick: bool, reps: int, seed: int, method: str = "fast") -> dict:
    """Table ``number`` (1–6): ours vs the paper per cell; writes table.csv and table.png."""
    penalty, M = TABLES[number]
    paper = paper_table()
    paper = paper[paper["table"] == number]
    levels = list(dict.fromkeys(zip(paper["epsilon"], paper["delta"])))
    n = 20_000 if quick else N_PAPER
    reps = reps or (2 if quick else 100)
    mcfg = method_config(method)
    L = 20 if quick else TABLE_ROUNDS
    settings, keys = make_settings(levels, TAUS)
    acc = np.zeros(settings.size)
    floors = []
    rng = np.random.default_rng(seed)
    with _progress(reps, f"zhou-table{number} (M={M}, {penalty})") as bar:
        task = bar.add_task("reps", total=reps)
        for r in range(reps):
            rep = simulate_rep(rng, n, standardize=mcfg["standardize"] == "each", c1=mcfg["c1"], n_workers=M)
            w, _ = run_settings(rep, M, settings, penalty=penalty, method=method, iterations=L, seed=seed * 100_003 + r)
            acc += mise(rep, w)
            if r < FLOOR_REPS:
                floors.append(qr_floor(rep, TAUS))
            bar.update(task, advance=1)
    ours = acc / reps
    floor = np.mean(floors, axis=0)
    tot = {lv: (total_epsilon([iteration_noise_multiplier(*lv)] * L, lv[1]) if math.isfinite(lv[0]) else math.inf)
           for lv in levels}
    rows = []
    for (eps, delta, t), v in zip(keys, ours):
        pm = paper[(paper["epsilon"] == eps) & (paper["delta"] == delta) & (paper["tau"] == t)]["paper_mise"].iloc[0]
        adv = paper_bound(eps, delta, L)
        fl = float(floor[TAUS.index(t)])
        rows.append({"M": M, "penalty": penalty, "epsilon": eps, "delta": delta, "tau": t, "ours_mise": v,
                     "paper_mise": float(pm), "total_epsilon": tot[(eps, delta)],
                     "total_epsilon_advanced": adv["epsilon"], "total_delta_advanced": adv["delta"],
                     "floor_mise": fl, "ratio_to_floor": v / fl, "rounds": L, "reps": reps, "n": n,
                     "method": method, "K": K_DEFAULT})
    df = pd.DataFrame(rows)
    df.to_csv(out / "table.csv", index=False)
    _plot_table(df, out / "table.png", number)
    won = float(np.mean(df["ours_mise"] <= df["paper_mise"]))
    nonpriv = df[~np.isfinite(df["epsilon"])]
    return {"cells": len(df), "share_ours_le_paper": round(won, 4),
            "nonprivate_ratio_to_floor_max": round(float(nonpriv["ratio_to_floor"].max()), 3),
            "reps": reps, "rounds": L, "n": n}


def _plot_table(df: pd.DataFrame, path: Path, number: int) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, len(TAUS), figsize=(4 * len(TAUS), 3.6), sharey=True)
    for ax, t in zip(axes, TAUS):
        g = df[(df["tau"] == t) & np.isfinite(df["epsilon"])]
        for delta, gd in g.groupby("delta"):
            l, = ax.plot(gd["epsilon"], gd["ours_mise"], marker="o", label=f"ours δ={delta:g}")
            ax.plot(gd["epsilon"], gd["paper_mise"], ls="--", marker="x", color=l.get_color(), label=f"paper δ={delta:g}")
        np_row = df[(df["tau"] == t) & ~np.isfinite(df["epsilon"])]
        ax.axhline(float(np_row["ours_mise"].iloc[0]), color="k", lw=1, label="ours, no privacy")
        ax.axhline(float(np_row["paper_mise"].iloc[0]), color="k", lw=1, ls="--", label="paper, no privacy")
        ax.axhline(float(np_row["floor_mise"].iloc[0]), color="gray", lw=1, ls=":", label="centralised QR floor")
        ax.set(title=f"τ = {t}", xlabel="ε per iteration", yscale="log")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("MISE")
    axes[-1].legend(fontsize=6)
    fig.suptitle(f"[Zhou] Table {number}: M = {df['M'].iloc[0]}, {df['penalty'].iloc[0]} — ours (solid) vs paper (dashed)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _make_table(number: int):
    @register(f"zhou-table{number}")
    def job(out: Path, *, quick: bool = False, reps: int = 0, seed: int = 0) -> dict:
        return run_table(number, out, quick=quick, reps=reps, seed=seed)

    job.__name__ = f"zhou_table{number}"
    job.__doc__ = f"[Zhou] Table {number}: MISE per (ε, δ, τ), ours vs the paper, with total ε."
    return job


for _t in TABLES:
    _make_table(_t)


# ----------------------------------------------------------------------------- figures
def _curves(penalty: str, M: int, *, quick: bool, seed: int, method: str):
    n = 20_000 if quick else N_PAPER
    mcfg = method_config(method)
    L = (60 if method == "paper" else 20) if quick else (mcfg["iterations"] if method == "paper" else TABLE_ROUNDS)
    rep = simulate_rep(np.random.default_rng(seed), n, standardize=mcfg["standardize"] == "each", c1=mcfg["c1"],
                       n_workers=M)
    settings, keys = make_settings(FIG_LEVELS, (0.5,))
    _, hist = run_settings(rep, M, settings, penalty=penalty, method=method, iterations=L, seed=seed, metrics_every=1)
    return keys, hist


def _label(eps, delta):
    return "no privacy" if not math.isfinite(eps) else f"ε={eps:g}, δ={delta:g}"


def run_figure(number: int, out: Path, *, quick: bool, seed: int) -> dict:
    """Fig. 1/4: final empirical loss vs M; Fig. 2/5: augmented objective per round; Fig. 3/6:
    empirical loss per round (τ = 0.5; ℓ1 for 1–3, ℓ2 for 4–6); published method and ``fast``."""
    penalty = "l1" if number <= 3 else "l2"
    kind = (number - 1) % 3
    plt = _plt()
    rows = []
    if kind == 0:
        # both panels on one y-axis (the two methods are compared), legend outside the data
        fig, axes = plt.subplots(1, 2, figsize=(11.5, 4), sharey=True)
        for ax, method in zip(axes, ("paper", "fast")):
            for M in (10, 20, 50):
                keys, hist = _curves(penalty, M, quick=quick, seed=seed, method=method)
                final = np.asarray(hist["empirical_loss"][-1]).reshape(-1)
                for (eps, delta, _), v in zip(keys, final):
                    rows.append({"method": method, "M": M, "epsilon": eps, "delta": delta, "empirical_loss": float(v)})
            df = pd.DataFrame(rows)
            for j, ((eps, delta), g) in enumerate(df[df["method"] == method].groupby(["epsilon", "delta"], sort=False)):
                ax.plot(g["M"], g["empirical_loss"], marker="osD^v"[j % 5], ls=("-", "--", "-.", ":")[j % 4],
                        label=_label(eps, delta))
            ax.set(title=f"{method} method", xlabel="number of workers M", xticks=(10, 20, 50))
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("final empirical check loss (τ = 0.5)")

        readable_log(axes[0], "y")
        legend_outside(axes[1])
        n_sim = 20_000 if quick else N_PAPER
    else:
        metric = "augmented_objective" if kind == 1 else "empirical_loss"
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, method in zip(axes, ("paper", "fast")):
            keys, hist = _curves(penalty, 10, quick=quick, seed=seed, method=method)
            H = np.array([np.asarray(h).reshape(-1) for h in hist[metric]])
            for j, (eps, delta, _) in enumerate(keys):
                ax.plot(np.arange(1, H.shape[0] + 1), H[:, j], label=_label(eps, delta))
                rows.extend({"method": method, "round": i + 1, "epsilon": eps, "delta": delta, metric: float(H[i, j])}
                            for i in range(H.shape[0]))
            ax.set(title=f"{method} method, M = 10, τ = 0.5", xlabel="iteration", ylabel=metric.replace("_", " "),
                   yscale="log")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    if kind == 0:
        fig.suptitle(f"[Zhou] Figure {number}: simulation of [Zhou, §5], n = {n_sim:,} curves, {penalty} penalty, "
                     f"K = {K_DEFAULT}, λ = {LAM:g}, ρ = {RHO:g}; per-iteration (ε, δ)", fontsize=10)
    else:
        fig.suptitle(f"[Zhou] Figure {number} ({penalty})")
    fig.tight_layout()
    fig.savefig(out / f"zhou-fig{number}.png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    pd.DataFrame(rows).to_csv(out / f"zhou-fig{number}.csv", index=False)
    return {"figure": f"zhou-fig{number}.png", "rows": len(rows)}


def _make_figure(number: int):
    @register(f"zhou-fig{number}")
    def job(out: Path, *, quick: bool = False, reps: int = 0, seed: int = 0) -> dict:
        return run_figure(number, out, quick=quick, seed=seed)

    job.__name__ = f"zhou_fig{number}"
    job.__doc__ = f"[Zhou] Figure {number}."
    return job


for _f in range(1, 7):
    _make_figure(_f)
