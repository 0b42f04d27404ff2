"""A private run's metrics.json holds no exact training count (issue 35, item 3).

Each protocol runs privately on a small table (301 training rows: no rate k/301 is a test rate m/101), and every
number in its metrics.json (``config`` and timings aside: settings and clocks) is inverted: it must not be the number
of positive training labels k (pooled, or of any node), nor k/n, nor the log loss of predicting a rate k'/n — on the
training labels (the entropy of the base rate) or on the test labels — for any integer k' (pooled n, or any node's).
Before the fix a gossip run's ``final.base_rate_train_loss`` inverted to the pooled count,
``final.test_base_rate_loss`` too, and ``final.node_base_rate_test_loss`` to each node's.
"""

from __future__ import annotations

import importlib.util
import json
import math

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file

from conftest import run_cli
from dpadmm.workflows.consensus import _node_data

N_TRAIN, N_TEST, D = 301, 101, 4
SKIP = ("config", "timing", "wall_seconds", "fit_seconds", "seconds", "train_seconds_per_run", "n_test")


def _table():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(N_TRAIN + N_TEST, D))
    y = np.where(X[:, 0] + 0.5 * X[:, 1] + rng.normal(size=len(X)) > 0.3, 1, -1)
    return X, y


def _numbers(obj, path=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k not in SKIP:
                yield from _numbers(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _numbers(v, f"{path}[{i}]")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool) and math.isfinite(obj):
        yield path, float(obj)


def _count_values(y_groups, y_test) -> dict[str, np.ndarray]:
    """Every value an exact count gives: per group (pooled, each node) k, k/n, 1 − k/n; the base-rate log loss of
    every k'/n on the training labels of that group and on the test labels."""
    out = {}
    t = np.mean(y_test > 0)
    for g, y in y_groups.items():
        n, k = len(y), int(np.sum(y > 0))
        p = np.arange(1, n) / n
        # the test set's own rate is the evaluator's (local): its loss, the entropy of t = of 1 − t, is allowed
        p = p[(p != 0.5) & (np.abs(p - t) > 1e-12) & (np.abs(p - (1 - t)) > 1e-12)]
        train_entropy = -(p * np.log(p) + (1 - p) * np.log1p(-p))
        test_loss = -(t * np.log(p) + (1 - t) * np.log1p(-p))
        out[g] = np.concatenate([[k, k / n, 1 - k / n], train_entropy, test_loss])
    return out


def _inverted(metrics: dict, values: dict) -> list[str]:
    hits = []
    for path, x in _numbers(metrics):
        for g, v in values.items():
            if np.any(np.abs(v - x) <= 1e-9 * max(1.0, abs(x))):
                hits.append(f"{path} = {x!r} (an exact count of {g})")
    return hits


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from dpadmm.data import write_party_files

    tmp = tmp_path_factory.mktemp("counts")
    X, y = _table()
    dump_svmlight_file(X[:N_TRAIN], y[:N_TRAIN], str(tmp / "train.svm"), zero_based=False)
    dump_svmlight_file(X[N_TRAIN:], y[N_TRAIN:], str(tmp / "test.svm"), zero_based=False)
    train = write_party_files([X[:N_TRAIN, :2], X[:N_TRAIN, 2:]], y[:N_TRAIN], tmp / "ptrain")
    test = write_party_files([X[N_TRAIN:, :2], X[N_TRAIN:, 2:]], y[N_TRAIN:], tmp / "ptest")
    return tmp, X, y, train, test


def _consensus_groups(X, y, nodes: int, seed: int) -> dict:
    _, ys = _node_data(X[:N_TRAIN], y[:N_TRAIN], nodes, "even", 10.0, seed)
    return {"the pooled training labels": y[:N_TRAIN], **{f"node {i}": np.asarray(v) for i, v in enumerate(ys)}}


CASES = {
    "gossip": (["consensus", "gossip", "--epsilon", "1", "--nodes", "3"], "consensus"),
    "gossip, declared bounds": (["consensus", "gossip", "--epsilon", "1", "--nodes", "3", "--bounds", "BOUNDS"], "consensus"),
    "m-admm": (["consensus", "madmm", "--perturbation", "pp", "--alpha", "5", "--fallback-epsilon", "0.4", "--nodes", "3",
                "--iterations", "5", "--normalize"], "consensus"),
    "vertical admm": (["vertical", "admm", "--epsilon", "5", "--label-epsilon", "1"], "vertical"),
    "vertical labels": (["vertical", "admm", "--label-epsilon", "1"], "vertical"),
    "experts": (["vertical", "experts", "--epsilon", "5"], "vertical"),
}
if importlib.util.find_spec("heu") is not None:
    CASES["encrypted"] = (["vertical", "encrypted", "--epsilon", "1", "--label-epsilon", "1",
                           "--iterations", "2", "--normalize-rows"], "vertical")


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c == "encrypted" else c
                                  for c in sorted(CASES)])  # encrypted: ~18 s (homomorphic rounds)
def test_private_metrics_invert_to_no_exact_training_count(case, data, capsys):
    tmp, X, y, train, test = data
    args, kind = CASES[case]
    bounds = tmp / "bounds.csv"
    bounds.write_text("lo,hi\n" + "-4,4\n" * D)
    args = [str(bounds) if a == "BOUNDS" else a for a in args]
    out = tmp / case.replace(" ", "_").replace(",", "")
    if kind == "consensus":
        args = [*args, "--data", tmp / "train.svm", "--test", tmp / "test.svm"]
        groups = _consensus_groups(X, y, int(args[args.index("--nodes") + 1]), 0)
    else:
        args = [*args, "--party", train[0], "--party", train[1], "--test-party", test[0], "--test-party", test[1]]
        groups = {"the training labels": y[:N_TRAIN]}
    code, _, err = run_cli([*args, "--seed", "0", "--quiet", "--out", out], capsys)
    assert code == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    hits = _inverted(metrics, _count_values(groups, y[N_TRAIN:]))
    assert not hits, "\n".join(hits[:10])
