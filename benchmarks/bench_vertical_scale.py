"""Vertical ADMM sharing against a pooled scikit-learn fit as rows grow (issue 37, the vertical part).

Dense synthetic data (``--cols`` columns, ~100, correlated through 5 latent factors, unequal scales, split evenly over ``--parties`` parties; labels from a planted
logistic model; a 20,000-row test set from the same model). Three fits, each in a **fresh process** (so peak RSS
is the fit's own; the data is generated in that process before the fit and counted for every fit alike):

- ``sklearn``: ``LogisticRegression(C=1/(λN))`` (lbfgs, default tolerance) on the pooled columns;
- ``nonprivate``: ``VerticalLogisticRegression(lam=λ)`` with its defaults (monitoring on, as a user gets it);
- ``label``: ``VerticalLogisticRegression(lam=λ, label_epsilon=1)`` (randomized response, then the label
  party's refit and its cross-validated choice).

Every child runs with ``OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = MKL_NUM_THREADS = 1`` (equal threads), fits are
interleaved (repeat r runs every case of every size before repeat r + 1) and the best of ``--repeats`` CPU
seconds (``time.process_time`` around ``fit``) is kept. Printed per size: CPU and wall seconds, the CPU ratio
to scikit-learn, peak RSS (``ru_maxrss``) and its ratio, the test log loss and its difference to scikit-learn's,
iterations, and for the label fit the label party's refit CPU seconds; the load average at start and end.

Run: ``python benchmarks/bench_vertical_scale.py --rows 30000 300000 --repeats 3 [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import warnings

CASES = ("sklearn", "nonprivate", "label")
TEST_ROWS = 20_000


def make_data(n, cols, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    w = rng.normal(size=cols) * (3.0 / np.sqrt(cols))
    # correlated columns (5 latent factors shared across parties, unequal scales), as real tables have
    load = rng.normal(size=(5, cols)) * 0.6
    Z = rng.normal(size=(n + TEST_ROWS, 5))
    X = rng.normal(size=(n + TEST_ROWS, cols))
    for a in range(0, len(X), 65536):  # X = Z @ load + noise, without an N × cols temporary (peak RSS = the data)
        X[a:a + 65536] += Z[a:a + 65536] @ load
    X *= np.exp(rng.normal(size=cols) * 0.5)
    y = (rng.random(n + TEST_ROWS) < 1.0 / (1.0 + np.exp(-(X @ w + 0.3)))).astype(int)
    return X[:n], y[:n], X[n:], y[n:]


def child(case, n, cols, parties, lam, own_blocks=False, trace=False):
    """One fit in this process; prints one JSON line."""
    import tracemalloc

    import numpy as np
    from sklearn.metrics import log_loss

    X, y, Xt, yt = make_data(n, cols)
    rss_data = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    out = {"case": case, "n": n}
    sizes = [cols // parties + (1 if m < cols % parties else 0) for m in range(parties)]
    edges = np.cumsum([0] + sizes)
    if case == "sklearn":
        from sklearn.linear_model import LogisticRegression

        if trace:
            tracemalloc.start()
        c0, t0 = time.process_time(), time.perf_counter()
        m = LogisticRegression(C=1.0 / (lam * n)).fit(X, y)
        out.update(cpu=time.process_time() - c0, wall=time.perf_counter() - t0, n_iter=int(m.n_iter_[0]))
        p = m.predict_proba(Xt)[:, 1]
    else:
        from dpadmm import VerticalLogisticRegression
        from dpadmm.algorithms.vertical import driver as fv

        blocks = [X[:, a:b] for a, b in zip(edges[:-1], edges[1:])]
        if own_blocks:  # each party holds its own columns only: the pooled matrix is gone before the fit
            blocks = [np.ascontiguousarray(B) for B in blocks]
        del X
        refit_cpu = []
        inner = fv.LABEL_PARTY_HANDLERS["refit"]

        def timed_refit(*a, **k):
            c = time.process_time()
            r = inner(*a, **k)
            refit_cpu.append(time.process_time() - c)
            return r

        fv.LABEL_PARTY_HANDLERS["refit"] = timed_refit
        kw = {"label_epsilon": 1.0, "random_state": 0} if case == "label" else {}
        if trace:
            tracemalloc.start()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            c0, t0 = time.process_time(), time.perf_counter()
            m = VerticalLogisticRegression(lam=lam, **kw).fit(blocks, y)
            out.update(cpu=time.process_time() - c0, wall=time.perf_counter() - t0, n_iter=int(m.n_iter_))
        if refit_cpu:
            out["refit_cpu"] = refit_cpu[0]
            out["choice"] = m.label_party_choice_
        p = m.predict_proba([Xt[:, a:b] for a, b in zip(edges[:-1], edges[1:])])[:, 1]
    if trace:  # the fit's own allocations beyond the data it was given (numpy and Python; CPU times then inflated)
        out["fit_alloc_peak_gb"] = tracemalloc.get_traced_memory()[1] / 2**30
        tracemalloc.stop()
    out["test_log_loss"] = float(log_loss(yt, p))
    out["rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    out["rss_data_gb"] = rss_data
    print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[30_000, 300_000])
    ap.add_argument("--cols", type=int, default=100)
    ap.add_argument("--parties", type=int, default=2)
    ap.add_argument("--lam", type=float, default=1e-4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    ap.add_argument("--own-blocks", action="store_true",
                    help="dpadmm gets one contiguous array per party and the pooled matrix is freed (a deployment's "
                         "memory); default: column views of the pooled matrix, which the parties copy")
    ap.add_argument("--trace-memory", action="store_true",
                    help="also report each fit's peak allocation (tracemalloc; its CPU seconds are then not comparable)")
    ap.add_argument("--json")
    ap.add_argument("--child", nargs=2, metavar=("CASE", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child[0], int(args.child[1]), args.cols, args.parties, args.lam, args.own_blocks,
                     args.trace_memory)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    res = {"load_start": os.getloadavg()[0], "own_blocks": args.own_blocks, "trace_memory": args.trace_memory,
           "cols": args.cols, "parties": args.parties, "lam": args.lam, "runs": []}
    print(f"load average at start {res['load_start']:.2f}", flush=True)
    for _ in range(args.repeats):
        for n in args.rows:
            for case in args.cases:
                cmd = [sys.executable, __file__, "--child", case, str(n), "--cols", str(args.cols),
                       "--parties", str(args.parties), "--lam", str(args.lam)]
                cmd += ["--own-blocks"] * args.own_blocks + ["--trace-memory"] * args.trace_memory
                line = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout.strip()
                rec = json.loads(line.splitlines()[-1])
                rec["load"] = os.getloadavg()[0]
                res["runs"].append(rec)
                print(json.dumps(rec), flush=True)
    res["load_end"] = os.getloadavg()[0]
    best = {}
    for r in res["runs"]:
        key = (r["n"], r["case"])
        if key not in best or r["cpu"] < best[key]["cpu"]:
            best[key] = r
    res["best"] = [dict(v) for v in best.values()]
    print(f"\nbest of {args.repeats} (CPU s); load average {res['load_start']:.2f} -> {res['load_end']:.2f}")
    print(f"{'rows':>9} {'case':>10} {'CPU s':>8} {'wall s':>8} {'CPU ratio':>9} {'RSS GB':>7} {'RSS ratio':>9} "
          f"{'test loss':>10} {'Δ loss':>9} {'iter':>5} {'refit CPU':>9}")
    for n in args.rows:
        sk = best.get((n, "sklearn"))
        for case in args.cases:
            r = best.get((n, case))
            if r is None:
                continue
            ratio = r["cpu"] / sk["cpu"] if sk else float("nan")
            rss = r["rss_gb"] / sk["rss_gb"] if sk else float("nan")
            dl = r["test_log_loss"] - sk["test_log_loss"] if sk else float("nan")
            print(f"{n:>9} {case:>10} {r['cpu']:>8.2f} {r['wall']:>8.2f} {ratio:>9.2f} {r['rss_gb']:>7.2f} "
                  f"{rss:>9.2f} {r['test_log_loss']:>10.5f} {dl:>+9.5f} {r['n_iter']:>5} "
                  f"{r.get('refit_cpu', float('nan')):>9.2f}"
                  + (f"  fit allocations peak {r['fit_alloc_peak_gb']:.3f} GB" if "fit_alloc_peak_gb" in r else ""))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
