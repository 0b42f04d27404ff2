"""Gossip consensus at ε = 1 against a pooled scikit-learn fit as rows and nodes grow (issue 37, the gossip part).

Dense synthetic data (``--cols`` columns, correlated through 5 latent factors, unequal scales; labels from a
planted logistic model; a 20,000-row test set from the same model: :func:`bench_vertical_scale.make_data`). For each
``--configs`` entry ``ROWS:NODES`` two fits, each in a **fresh process** (so peak RSS is the fit's own; the data is
generated in that process before the fit and counted for both alike):

- ``sklearn``: ``LogisticRegression(C=1/(λN))`` (lbfgs, default tolerance) on the pooled rows;
- ``gossip``: ``ConsensusLogisticRegression(epsilon=1, n_nodes=NODES)`` with its defaults (ring, even split, the
  public schedule, a DP column range, each node's own choice by cross-validation on its own rows), in process.

Every child runs with ``OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = MKL_NUM_THREADS = 1`` (equal threads), fits are
interleaved (repeat r runs every case of every configuration before repeat r + 1) and the best of ``--repeats`` CPU
seconds (``time.process_time`` around ``fit``) is kept. Printed per configuration: CPU and wall seconds, the CPU
ratio to scikit-learn, peak RSS (``ru_maxrss``) and its ratio, the test log loss (gossip: the consensus model) and
its difference to scikit-learn's, rounds, and for gossip the CPU seconds of the nodes' own choice
(``choice.choose``, after the rounds); the load average at start and end.

``--baseline-src DIR`` adds the gossip fit on another checkout's sources (``gossip-base``, e.g. main's ``src``),
interleaved with the others: before and after in one run, with a closing table of after ÷ before (CPU, wall, peak
RSS) and each side's CPU ratio to scikit-learn.

Run: ``python benchmarks/bench_gossip_scale.py --configs 200000:5 1000000:5 200000:200 --repeats 3 [--json out.json]``.
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

from bench_vertical_scale import make_data

CASES = ("sklearn", "gossip")
BASE = "gossip-base"  # the gossip fit on another checkout's sources (--baseline-src): before/after side by side


def child(case, n, nodes, cols, lam, epsilon):
    """One fit in this process; prints one JSON line."""
    from sklearn.metrics import log_loss

    X, y, Xt, yt = make_data(n, cols)
    rss_data = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    out = {"case": case, "n": n, "nodes": nodes}
    if case == "sklearn":
        from sklearn.linear_model import LogisticRegression

        c0, t0 = time.process_time(), time.perf_counter()
        m = LogisticRegression(C=1.0 / (lam * n)).fit(X, y)
        out.update(cpu=time.process_time() - c0, wall=time.perf_counter() - t0, n_iter=int(m.n_iter_[0]))
    else:
        from dpadmm import ConsensusLogisticRegression
        from dpadmm.algorithms.gossip import driver

        choice_cpu = []
        inner = driver.node_choice.choose

        def timed_choose(*a, **k):
            c = time.process_time()
            r = inner(*a, **k)
            choice_cpu.append(time.process_time() - c)
            return r

        driver.node_choice.choose = timed_choose
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            c0, t0 = time.process_time(), time.perf_counter()
            m = ConsensusLogisticRegression(epsilon=epsilon, n_nodes=nodes, random_state=0).fit(X, y)
            out.update(cpu=time.process_time() - c0, wall=time.perf_counter() - t0, n_iter=int(m.n_iter_))
        out["choice_cpu"] = float(sum(choice_cpu))
        out["regime"] = m.regime_
    out["test_log_loss"] = float(log_loss(yt, m.predict_proba(Xt)[:, 1]))
    out["rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    out["rss_data_gb"] = rss_data
    print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", nargs="+", default=["200000:5", "1000000:5", "200000:200"], help="ROWS:NODES")
    ap.add_argument("--cols", type=int, default=50)
    ap.add_argument("--lam", type=float, default=1e-4, help="scikit-learn's C = 1/(λ n) (gossip's ridge default)")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    ap.add_argument("--baseline-src", help="also run the gossip fit with PYTHONPATH=DIR (e.g. main's src/), "
                                           "interleaved with the others, as the case 'gossip-base'")
    ap.add_argument("--json")
    ap.add_argument("--child", nargs=3, metavar=("CASE", "N", "NODES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child[0], int(args.child[1]), int(args.child[2]), args.cols, args.lam, args.epsilon)
    configs = [tuple(int(v) for v in c.split(":")) for c in args.configs]
    cases = list(args.cases) + [BASE] * bool(args.baseline_src)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    res = {"load_start": os.getloadavg()[0], "baseline_src": args.baseline_src, "cols": args.cols, "lam": args.lam, "epsilon": args.epsilon, "runs": []}
    print(f"load average at start {res['load_start']:.2f}", flush=True)
    for _ in range(args.repeats):
        for n, nodes in configs:
            for case in cases:
                run_env = dict(env, PYTHONPATH=args.baseline_src) if case == BASE else env
                cmd = [sys.executable, __file__, "--child", "gossip" if case == BASE else case, str(n), str(nodes),
                       "--cols", str(args.cols),
                       "--lam", str(args.lam), "--epsilon", str(args.epsilon)]
                line = subprocess.run(cmd, env=run_env, check=True, capture_output=True, text=True).stdout.strip()
                rec = json.loads(line.splitlines()[-1])
                rec["case"] = case
                rec["load"] = os.getloadavg()[0]
                res["runs"].append(rec)
                print(json.dumps(rec), flush=True)
    res["load_end"] = os.getloadavg()[0]
    best = {}
    for r in res["runs"]:
        key = (r["n"], r["nodes"], r["case"])
        if key not in best or r["cpu"] < best[key]["cpu"]:
            best[key] = r
    res["best"] = [dict(v) for v in best.values()]
    print(f"\nbest of {args.repeats} (CPU s); load average {res['load_start']:.2f} -> {res['load_end']:.2f}")
    print(f"{'rows':>9} {'nodes':>5} {'case':>11} {'CPU s':>8} {'wall s':>8} {'CPU ratio':>9} {'RSS GB':>7} "
          f"{'RSS ratio':>9} {'test loss':>10} {'Δ loss':>9} {'iter':>5} {'choice CPU':>10}")
    for n, nodes in configs:
        sk = best.get((n, nodes, "sklearn"))
        for case in cases:
            r = best.get((n, nodes, case))
            if r is None:
                continue
            ratio = r["cpu"] / sk["cpu"] if sk else float("nan")
            rss = r["rss_gb"] / sk["rss_gb"] if sk else float("nan")
            dl = r["test_log_loss"] - sk["test_log_loss"] if sk else float("nan")
            print(f"{n:>9} {nodes:>5} {case:>11} {r['cpu']:>8.2f} {r['wall']:>8.2f} {ratio:>9.2f} {r['rss_gb']:>7.2f} "
                  f"{rss:>9.2f} {r['test_log_loss']:>10.5f} {dl:>+9.5f} {r['n_iter']:>5} "
                  f"{r.get('choice_cpu', float('nan')):>10.2f}")
    if args.baseline_src:  # before/after in one run: the same fit on this checkout against the baseline sources
        print(f"\nafter ÷ before ({BASE} = {args.baseline_src}), best of {args.repeats}, interleaved")
        print(f"{'rows':>9} {'nodes':>5} {'CPU':>7} {'wall':>7} {'peak RSS':>8} {'× sklearn before':>16} "
              f"{'× sklearn after':>15} {'Δ test loss':>11}")
        for n, nodes in configs:
            a, b, sk = (best.get((n, nodes, c)) for c in ("gossip", BASE, "sklearn"))
            if a is None or b is None:
                continue
            skb = f"{b['cpu'] / sk['cpu']:.2f}" if sk else "nan"
            ska = f"{a['cpu'] / sk['cpu']:.2f}" if sk else "nan"
            print(f"{n:>9} {nodes:>5} {a['cpu'] / b['cpu']:>7.2f} {a['wall'] / b['wall']:>7.2f} "
                  f"{a['rss_gb'] / b['rss_gb']:>8.2f} {skb:>16} {ska:>15} "
                  f"{a['test_log_loss'] - b['test_log_loss']:>+11.5f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
