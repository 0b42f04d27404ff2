"""Scaling of vertical ADMM sharing [Hu]: sparse blocks, wide blocks, honest comparison with scikit-learn.

Cases (``--case``):

- ``headline``: N = 500,000 rows, 2 parties × 50,000 binary sparse features (8 non-zeros per row per
  party, hashed-style one-hot), labels from a planted logistic model, λ = 1e-5, non-private.
  Reported: peak RSS of this process after data generation and the first dpadmm fit (before the
  pooled copy for scikit-learn exists); dpadmm setup seconds (validation + party setup) and training
  seconds until the objective is within 1e-3 (relative) of the optimum; scikit-learn lbfgs on the
  pooled CSR matrix, (a) default tolerance and (b) stopped at the same gap (the smallest
  ``max_iter`` whose fit reaches it, timed on its own); per-iteration time and its floor.
- ``table``: the scaling table — several (N, d, density) problems, one fit each: peak memory
  (tracemalloc, numpy/scipy buffers), setup, ms/iteration, floor, solver chosen.
- ``setup``: setup seconds of one dense party block against its width d for ``eigh`` and ``cg``.

Every timing runs under one thread (threadpoolctl: BLAS and OpenMP — scikit-learn's loss uses OpenMP) for both libraries, side by side in this
process, alternating repeats; medians are printed with the load average at start and end.

Floor of one iteration: what any iteration of ADMM sharing must do — each party one ``D_m x`` and
one ``D_mᵀ u`` product, the coordinator one pass of the loss derivative over N samples — timed
here on the same data.

Run: ``python benchmarks/bench_scale.py --case headline --repeats 3 [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
import tracemalloc
import warnings

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_info, threadpool_limits

GAP = 1e-3


def make_sparse_vertical(n, d, k=8, parties=2, seed=0):
    """Binary sparse blocks: k non-zeros per row per party (one per k column strata), planted labels."""
    rng = np.random.default_rng(seed)
    blocks = []
    for _ in range(parties):
        width = d // k
        cols = (np.arange(k) * width)[None, :] + rng.integers(0, width, size=(n, k))
        indptr = np.arange(0, n * k + 1, k, dtype=np.int64)
        blocks.append(sp.csr_matrix((np.ones(n * k), cols.ravel().astype(np.int32), indptr), shape=(n, d)))
    s = sum(B @ (0.5 * rng.normal(size=d)) for B in blocks)
    y = np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-s)), 1, 0)
    return blocks, y


def make_dense_vertical(n, d, parties=2, seed=0):
    rng = np.random.default_rng(seed)
    blocks = [rng.normal(size=(n, d)) / np.sqrt(d) for _ in range(parties)]
    s = sum(B @ rng.normal(size=d) for B in blocks)
    return blocks, (rng.random(n) < 1.0 / (1.0 + np.exp(-s))).astype(int)


def objective(X, y01, lam, coef, intercept):
    s = X @ coef + intercept
    ypm = np.where(y01 == 1, 1.0, -1.0)
    return float(np.mean(np.logaddexp(0.0, -ypm * s)) + 0.5 * lam * coef @ coef)


def sklearn_fit(X, y, lam, **kw):
    from sklearn.linear_model import LogisticRegression

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        m = LogisticRegression(C=1.0 / (lam * X.shape[0]), **kw).fit(X, y)
        return time.perf_counter() - t, m


def sklearn_iterations_to_gap(X, y, lam, opt, gap=GAP, limit=200):
    """Smallest lbfgs max_iter whose fit is within ``gap`` of the optimum."""
    for k in range(1, limit + 1):
        _, m = sklearn_fit(X, y, lam, max_iter=k)
        if (objective(X, y, lam, m.coef_.ravel(), m.intercept_[0]) - opt) / opt <= gap:
            return k
    return None


def dpadmm_fit(blocks, y, lam, max_iter, **kw):
    from dpadmm import VerticalLogisticRegression

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        m = VerticalLogisticRegression(lam=lam, max_iter=max_iter, tol=0, monitor=True, **kw).fit(blocks, y)
        wall = time.perf_counter() - t
    return m, wall


def time_to_gap(m, opt, gap=GAP):
    obj = np.asarray(m.history_["objective"])
    hit = np.flatnonzero((obj - opt) / opt <= gap)
    if not hit.size:
        return float("inf"), None
    return float(m.history_["seconds"][hit[0]]), int(hit[0] + 1)


def floor_per_iteration(blocks, n, repeats=5):
    """Seconds of the unavoidable work of one iteration (see the module docstring)."""
    from dpadmm.kernels.losses import LogisticLoss

    loss = LogisticLoss()
    rng = np.random.default_rng(1)
    xs = [rng.normal(size=B.shape[1]) for B in blocks]
    u = rng.normal(size=n)
    yy = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        for B, x in zip(blocks, xs):
            B @ x
            B.T @ u
        loss.grad_hess(u, yy)
        out.append(time.perf_counter() - t)
    return float(np.median(out))


def solver_kind(block):
    """The x-step solver ``solver="auto"`` picks for this block."""
    from dpadmm.kernels.linalg import EIGH_MAX_DIM, EIGH_MAX_DIM_SPARSE

    return "eigh" if block.shape[1] <= (EIGH_MAX_DIM_SPARSE if sp.issparse(block) else EIGH_MAX_DIM) else "cg"


def load():
    return float(os.getloadavg()[0])


def blas_report():
    return [{k: v for k, v in d.items() if k in ("internal_api", "num_threads", "architecture")}
            for d in threadpool_info() if d.get("user_api") == "blas"]


def case_headline(args):
    lam = 1e-5
    res = {"case": "headline", "load_start": load(), "env": {k: os.environ.get(k) for k in
                                                             ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}}
    with threadpool_limits(1):
        res["blas"] = blas_report()
        t = time.perf_counter()
        blocks, y = make_sparse_vertical(args.n, args.d, k=8, parties=2, seed=0)
        res["generate_seconds"] = time.perf_counter() - t
        res["data_mb"] = sum(b.data.nbytes + b.indices.nbytes + b.indptr.nbytes for b in blocks) / 2**20
        m, wall = dpadmm_fit(blocks, y, lam, args.max_iter)
        res["peak_rss_gb_after_dpadmm"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        res["solver"] = solver_kind(blocks[0])
        X = sp.hstack(blocks, format="csr")
        _, mo = sklearn_fit(X, y, lam, tol=1e-10, max_iter=10_000)
        opt = objective(X, y, lam, mo.coef_.ravel(), mo.intercept_[0])
        res["optimum"] = opt
        k_gap = sklearn_iterations_to_gap(X, y, lam, opt)
        res["sklearn_iterations_to_gap"] = k_gap
        rows = []
        for r in range(args.repeats):
            if r > 0:
                m, wall = dpadmm_fit(blocks, y, lam, args.max_iter)
            t_gap, it_gap = time_to_gap(m, opt)
            sk_default, skm = sklearn_fit(X, y, lam)
            sk_gap, _ = sklearn_fit(X, y, lam, max_iter=k_gap)
            rows.append({"dpadmm_setup_s": m.setup_seconds_, "dpadmm_train_to_gap_s": t_gap,
                         "dpadmm_iterations_to_gap": it_gap, "dpadmm_wall_s": wall,
                         "dpadmm_ms_per_iteration": 1e3 * m.history_["seconds"][-1] / m.n_iter_,
                         "sklearn_default_s": sk_default, "sklearn_default_iterations": int(skm.n_iter_[0]),
                         "sklearn_to_gap_s": sk_gap, "floor_ms": 1e3 * floor_per_iteration(blocks, len(y))})
            print(json.dumps(rows[-1]), flush=True)
    med = {k: float(np.median([r[k] for r in rows if r[k] is not None])) for k in rows[0]}
    res["runs"] = rows
    res["median"] = med
    res["ratio_train_to_gap_vs_sklearn_default"] = med["dpadmm_train_to_gap_s"] / med["sklearn_default_s"]
    res["ratio_train_to_gap_vs_sklearn_to_gap"] = med["dpadmm_train_to_gap_s"] / med["sklearn_to_gap_s"]
    res["ratio_setup_vs_sklearn_default"] = med["dpadmm_setup_s"] / med["sklearn_default_s"]
    res["ratio_iteration_vs_floor"] = med["dpadmm_ms_per_iteration"] / med["floor_ms"]
    res["load_end"] = load()
    return res


TABLE = [
    # (kind, N, d per party, non-zeros per row per party)
    ("sparse", 100_000, 1_000, 8),
    ("sparse", 100_000, 10_000, 8),
    ("sparse", 500_000, 50_000, 8),
    ("sparse", 1_000_000, 10_000, 10),
    ("dense", 20_000, 500, None),
    ("dense", 5_000, 10_000, None),
]


def case_table(args):
    lam = 1e-5
    out = {"case": "table", "load_start": load(), "rows": []}
    with threadpool_limits(1):
        dpadmm_fit(*make_sparse_vertical(1000, 600, k=4), lam, 2)  # warm-up: imports are not the fit's memory
        for kind, n, d, k in TABLE:
            if kind == "sparse":
                blocks, y = make_sparse_vertical(n, d, k=k, seed=0)
                density = k / d
                data_mb = sum(b.data.nbytes + b.indices.nbytes + b.indptr.nbytes for b in blocks) / 2**20
            else:
                blocks, y = make_dense_vertical(n, d, seed=0)
                density = 1.0
                data_mb = sum(b.nbytes for b in blocks) / 2**20
            tracemalloc.start()
            m, wall = dpadmm_fit(blocks, y, lam, args.table_iterations)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            row = {"kind": kind, "N": n, "d_per_party": d, "parties": 2, "density": density, "data_mb": data_mb,
                   "peak_traced_mb": peak / 2**20, "setup_s": m.setup_seconds_,
                   "ms_per_iteration": 1e3 * m.history_["seconds"][-1] / m.n_iter_,
                   "floor_ms": 1e3 * floor_per_iteration(blocks, n), "solver": solver_kind(blocks[0]),
                   "iterations": m.n_iter_}
            out["rows"].append(row)
            print(json.dumps(row), flush=True)
            del blocks, y, m
    out["load_end"] = load()
    return out


def case_setup(args):
    from dpadmm.algorithms.vertical import party as vs
    from dpadmm.kernels import L2

    out = {"case": "setup", "load_start": load(), "rows": []}
    rng = np.random.default_rng(0)
    with threadpool_limits(1):
        for d in args.setup_dims:
            D = rng.normal(size=(args.setup_rows, d))
            row = {"N": args.setup_rows, "d": d}
            for solver in ("eigh", "cg"):
                if solver == "eigh" and d > args.eigh_limit:
                    row["eigh_s"] = None
                    continue
                t = time.perf_counter()
                vs.make_party("p", D, lam_sum=1.0, reg=L2(), solver=solver)
                row[f"{solver}_s"] = time.perf_counter() - t
            out["rows"].append(row)
            print(json.dumps(row), flush=True)
    out["load_end"] = load()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=("headline", "table", "setup"), default="headline")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n", type=int, default=500_000)
    ap.add_argument("--d", type=int, default=50_000)
    ap.add_argument("--max-iter", type=int, default=15)
    ap.add_argument("--table-iterations", type=int, default=10)
    ap.add_argument("--setup-rows", type=int, default=5_000)
    ap.add_argument("--setup-dims", type=int, nargs="+", default=[500, 1000, 2000, 4000, 10_000])
    ap.add_argument("--eigh-limit", type=int, default=4000)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    res = {"headline": case_headline, "table": case_table, "setup": case_setup}[args.case](args)
    summary = {k: v for k, v in res.items() if k not in ("runs", "rows")}
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2)


if __name__ == "__main__":
    main()
