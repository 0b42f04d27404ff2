"""Speed of distributed functional quantile regression [Zhou] and the full Table 1 reproduction.

Workloads (simulation of [Zhou, §5], n = 100,000 curves, K = 6, M = 10 workers, the ``fast`` method):

1. ``batched``: all 105 (τ, privacy) settings of a table row-set in one virtual party (one engine run,
   iterates (1, M, 105, K)) — what the reproductions use;
   ``per-setting``: the same settings run one at a time (one engine run per setting, a sample of
   ``--sample`` settings, scaled to 105). Ratio = per-setting / batched.
2. ``estimator``: ``FunctionalQuantileRegressor`` (one party per worker, M = 10; ``fast``, 200 rounds, and
   ``exact``) against the floor (one read of the curves plus their moment matrix) and the centralised
   baseline statsmodels ``QuantReg`` on the same scores, all at one BLAS thread.
3. ``--curves 1000 10000 100000``: ``FunctionalQuantileRegressor`` (defaults: ``fast``, M = 10, monitor off)
   against what a user runs instead — scikit-learn's ``PCA(K)`` on the curves **plus** statsmodels ``QuantReg`` on
   its scores (the PCA counted) — at each size, both in this process at one BLAS thread, interleaved, best of
   ``--repeats`` CPU seconds (``time.process_time``) with the wall seconds beside, and the load average.
4. ``--table1``: one timed run of ``dpadmm reproduce zhou-table1`` in full (100 repetitions), writing
   ``benchmarks/results/zhou-table1/table.csv``; reports the wall time and the share of cells where
   ours ≤ the paper's MISE.

Medians over ``--repeats``. Usage:
``python benchmarks/bench_functional.py [--repeats 3] [--sample 5] [--curves 1000 10000 100000] [--skip-micro]
[--table1]``
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def bench_batched(repeats: int, sample: int) -> dict:
    from dpadmm.experiments.zhou import TAUS, make_settings, paper_table, run_settings, simulate_rep
    from dpadmm.algorithms.functional import messages as fq

    paper = paper_table()
    paper = paper[paper["table"] == 1]
    levels = list(dict.fromkeys(zip(paper["epsilon"], paper["delta"])))
    rep = simulate_rep(np.random.default_rng(0), 100_000, n_workers=10)
    st, keys = make_settings(levels, TAUS)
    batched, single = [], []
    for r in range(repeats):
        t = time.perf_counter()
        run_settings(rep, 10, st, penalty="l1", method="fast", seed=r)
        batched.append(time.perf_counter() - t)
        idx = np.random.default_rng(r).choice(st.size, size=sample, replace=False)
        t = time.perf_counter()
        for i in idx:
            one = fq.Settings(*(np.asarray(getattr(st, f))[i:i + 1] for f in
                                ("tau", "shift", "noise_multiplier", "lam", "eps_iter", "delta_iter")))
            run_settings(rep, 10, one, penalty="l1", method="fast", seed=r)
        single.append((time.perf_counter() - t) * st.size / sample)
    b, s = float(np.median(batched)), float(np.median(single))
    return {"settings": st.size, "batched_seconds": b, "per_setting_seconds_scaled": s, "speedup": s / b}


def bench_estimator(repeats: int) -> dict:
    """n = 100k curves on 100 points, M = 10: the fit against the floor (one read of the data plus its
    moment matrix — what any method must at least do) and against statsmodels QuantReg on the same scores,
    everything at one BLAS thread (the engine's cap)."""
    import statsmodels.api as sm
    from threadpoolctl import threadpool_limits

    from dpadmm import FunctionalQuantileRegressor
    from dpadmm.data.functional import simulate_zhou

    d = simulate_zhou(100_000, tau=0.5, random_state=0)
    X = d.curves
    out = {}
    with threadpool_limits(1, user_api="blas"):
        floor = []
        for _ in range(repeats):
            t = time.perf_counter()
            X.sum(0)
            X.T @ X
            floor.append(time.perf_counter() - t)
        out["floor_seconds"] = float(np.median(floor))
        for method in ("fast", "exact"):
            ts = []
            for r in range(repeats):
                t = time.perf_counter()
                est = FunctionalQuantileRegressor(tau=0.5, workers=10, method=method, random_state=r,
                                                  monitor=False).fit(X, d.y)
                ts.append(time.perf_counter() - t)
            out[f"{method}_seconds"] = float(np.median(ts))
            out[f"{method}_rounds"] = int(est.n_iter_)
            out[f"{method}_over_floor"] = out[f"{method}_seconds"] / out["floor_seconds"]
        A = est.basis_.scores(X)
        base = []
        for _ in range(repeats):
            t = time.perf_counter()
            sm.QuantReg(d.y, np.c_[A, np.ones(len(A))]).fit(q=0.5)
            base.append(time.perf_counter() - t)
        out["statsmodels_quantreg_seconds"] = float(np.median(base))
        out["fast_over_quantreg"] = out["fast_seconds"] / out["statsmodels_quantreg_seconds"]
    return out


def bench_small_n(curves, repeats: int) -> dict:
    """The fit against PCA + QuantReg at each number of curves (module docstring, 3.): best-of CPU and wall."""
    import os
    import warnings

    import statsmodels.api as sm
    from sklearn.decomposition import PCA
    from threadpoolctl import threadpool_limits

    from dpadmm import FunctionalQuantileRegressor
    from dpadmm.data.functional import simulate_zhou

    def ours(d):
        FunctionalQuantileRegressor(tau=0.5, workers=10, random_state=0, monitor=False).fit(d.curves, d.y)

    def baseline(d):
        A = PCA(n_components=6).fit_transform(d.curves)
        sm.QuantReg(d.y, np.c_[A, np.ones(len(A))]).fit(q=0.5)

    out = {"load_start": os.getloadavg()[0], "sizes": {}}
    with threadpool_limits(1, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = {n: simulate_zhou(n, tau=0.5, random_state=0) for n in curves}
        ours(data[curves[0]])  # imports and first-call set-up, for both sides
        baseline(data[curves[0]])
        runs = {(n, c): [] for n in curves for c in ("functional", "pca+quantreg")}
        for _ in range(repeats):
            for n in curves:
                for case, f in (("functional", ours), ("pca+quantreg", baseline)):
                    c, t = time.process_time(), time.perf_counter()
                    f(data[n])
                    runs[(n, case)].append((time.process_time() - c, time.perf_counter() - t))
    out["load_end"] = os.getloadavg()[0]
    print(f"best of {repeats} (CPU s), one BLAS thread; load average {out['load_start']:.2f} -> {out['load_end']:.2f}")
    print(f"{'curves':>8} {'ours CPU':>9} {'ours wall':>9} {'PCA+QR CPU':>10} {'PCA+QR wall':>11} {'CPU ratio':>9} "
          f"{'wall ratio':>10}")
    for n in curves:
        a, b = min(runs[(n, "functional")]), min(runs[(n, "pca+quantreg")])
        out["sizes"][str(n)] = {"functional_cpu": a[0], "functional_wall": a[1], "baseline_cpu": b[0],
                                "baseline_wall": b[1], "cpu_ratio": a[0] / b[0], "wall_ratio": a[1] / b[1]}
        print(f"{n:>8} {a[0]:>9.3f} {a[1]:>9.3f} {b[0]:>10.3f} {b[1]:>11.3f} {a[0] / b[0]:>9.2f} {a[1] / b[1]:>10.2f}")
    return out


def bench_table1(out: Path) -> dict:
    from dpadmm.experiments.zhou import run_table

    out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    summary = run_table(1, out, quick=False, reps=100, seed=0)
    summary["wall_seconds"] = time.perf_counter() - t
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sample", type=int, default=5)
    ap.add_argument("--table1", action="store_true", help="also time the full Table 1 reproduction (100 reps)")
    ap.add_argument("--skip-micro", action="store_true")
    ap.add_argument("--curves", type=int, nargs="+", help="also the fit against PCA + QuantReg at these sizes")
    args = ap.parse_args()
    res_dir = Path(__file__).parent / "results"
    res_dir.mkdir(exist_ok=True)
    results = {}
    if not args.skip_micro:
        results["batched_vs_per_setting"] = bench_batched(args.repeats, args.sample)
        print(json.dumps(results["batched_vs_per_setting"], indent=2), flush=True)
        results["estimator_vs_statsmodels"] = bench_estimator(args.repeats)
        print(json.dumps(results["estimator_vs_statsmodels"], indent=2), flush=True)
    if args.curves:
        results["small_n_vs_pca_quantreg"] = bench_small_n(args.curves, args.repeats)
    if args.table1:
        results["table1_full"] = bench_table1(res_dir / "zhou-table1")
        print(json.dumps(results["table1_full"], indent=2), flush=True)
    path = res_dir / "functional.json"
    old = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps(old | results, indent=2) + "\n")


if __name__ == "__main__":
    main()
