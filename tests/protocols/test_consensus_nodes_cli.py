"""`dpadmm consensus --node FILE …`: the user's own nodes, one file per node, kept as given (issue 38, item 1)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dpadmm.cli import main

SIZES = (60, 150, 330)  # uneven natural nodes


def _rows(n, seed, shift):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) + shift  # each node its own distribution
    y = np.where(X[:, 0] - 0.5 * X[:, 1] + rng.normal(size=n) > shift, 1, -1)
    return X, y


def _svm(path, X, y):
    with open(path, "w") as fh:
        for xi, yi in zip(X, y):
            fh.write(f"{yi:+d} " + " ".join(f"{j + 1}:{v:.6f}" for j, v in enumerate(xi)) + "\n")
    return str(path)


def _csv(path, X, y, columns=("a", "b", "c")):
    df = pd.DataFrame(X, columns=list(columns))
    df.insert(0, "id", np.arange(len(y)))
    df["y"] = (y > 0).astype(int)
    df.to_csv(path, index=False)
    return str(path)


def _raw_labels(path, X, y):
    """A node file whose labels are written as given (``_csv`` writes y > 0)."""
    pd.DataFrame({"id": np.arange(len(y)), **{c: X[:, j] for j, c in enumerate("abc")}, "y": y}).to_csv(path,
                                                                                                        index=False)
    return str(path)


def test_a_node_of_one_class_runs(tmp_path, capsys):
    """A private gossip run counts no class, in a node or over all (red team 2026-11-29, T3): a node whose rows are
    all yes runs as its neighbour with one row no does."""
    train, _ = _nodes(tmp_path, _csv, "csv")
    X, _ = _rows(50, 9, 0.0)
    for tag, y in (("all", np.ones(50, int)), ("one", np.r_[0, np.ones(49, int)])):
        code = main(["consensus", "gossip", "--node", train[0], "--node", _raw_labels(tmp_path / f"{tag}.csv", X, y),
                     "--epsilon", "1", "--iterations", "3", "--quiet", "--out", str(tmp_path / tag)])
        assert code == 0, capsys.readouterr().err


def _nodes(tmp_path, writer, ext):
    train, test = [], []
    for i, n in enumerate(SIZES):
        X, y = _rows(n + 40, i, shift=0.5 * i)
        train.append(writer(tmp_path / f"node{i}.{ext}", X[:n], y[:n]))
        test.append(writer(tmp_path / f"node{i}_test.{ext}", X[n:], y[n:]))
    return train, test


@pytest.mark.parametrize("writer,ext", [(_svm, "svm"), (_csv, "csv")])
def test_node_files_are_the_nodes_as_given(tmp_path, capsys, writer, ext):
    train, test = _nodes(tmp_path, writer, ext)
    out = tmp_path / "run"
    args = ["consensus", "gossip", "--epsilon", "1", "--seed", "3", "--quiet", "--out", str(out)]
    for a, b in zip(train, test):
        args += ["--node", a, "--test-node", b]
    assert main(args) == 0
    m = json.loads((out / "metrics.json").read_text())
    c = m["config"]
    assert c["nodes"] == 3 and c["split"] == "as given"
    assert (c["node_size_min"], c["node_size_max"]) == (min(SIZES), max(SIZES))  # no random re-split
    assert m["final"]["n_test"] == 40 * len(SIZES)  # the --test-node files pooled for the consensus model
    assert len(m["final"]["node_test_loss"][0]) == 3  # each node judged on its own test rows
    assert "as given" in capsys.readouterr().out
    npz = np.load(out / "node_models.npz")
    assert npz["node_coefs"].shape == (3, 3)


def test_node_files_match_the_python_api(tmp_path):
    """The CLI's consensus model is the estimator's on the same node lists at the same seed."""
    from dpadmm.estimators import ConsensusLogisticRegression
    from dpadmm.workflows.consensus import load_data

    train, _ = _nodes(tmp_path, _svm, "svm")
    out = tmp_path / "run"
    args = ["consensus", "gossip", "--epsilon", "2", "--seed", "5", "--quiet", "--out", str(out)]
    for a in train:
        args += ["--node", a]
    assert main(args) == 0
    Xs, ys = zip(*(load_data(p) for p in train))
    seed = int(np.random.SeedSequence([5, 0]).generate_state(1)[0])
    est = ConsensusLogisticRegression(epsilon=2, protocol="gossip", random_state=seed).fit(list(Xs), list(ys))
    np.testing.assert_allclose(np.load(out / "model.npz")["coef"], est.coef_, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case,needle", [
    ("columns", "other feature columns than"),
    ("outside", "a private binary run reads labels as 0/1 or -1/+1"),  # the domain; a one-class node runs (T3)
    ("one_node", "at least two node files"),
    ("missing", "node file not found"),
    ("nodes", "drop --nodes"),
    ("test_count", "one test file per node"),
    ("mixed", "one format"),
    ("no_epsilon", "missing option --epsilon"),
    ("data_too", "not both"),
])
def test_bad_node_files_are_one_clear_error(tmp_path, capsys, case, needle):
    train, test = _nodes(tmp_path, _csv, "csv")
    X, y = _rows(50, 9, 0.0)
    args = {"columns": ["--node", train[0], "--node", _csv(tmp_path / "other.csv", X, y, ("a", "b", "d"))],
            "outside": ["--node", train[0], "--node", _raw_labels(tmp_path / "two.csv", X, np.full(50, 2))],
            "one_node": ["--node", train[0]],
            "missing": ["--node", train[0], "--node", str(tmp_path / "nope.csv")],
            "nodes": ["--node", train[0], "--node", train[1], "--nodes", "3"],
            "test_count": ["--node", train[0], "--node", train[1], "--test-node", test[0]],
            "mixed": ["--node", train[0], "--node", _svm(tmp_path / "n.svm", X, y)],
            "no_epsilon": ["--node", train[0], "--node", train[1]],
            "data_too": ["--node", train[0], "--node", train[1], "--data", train[2]]}[case]
    out = tmp_path / "run"
    code = main(["consensus", "gossip", *args, *([] if case == "no_epsilon" else ["--epsilon", "1"]), "--quiet", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err and err.count("error:") == 1
    assert not out.exists()  # nothing half-written
