"""The bad inputs of issue 6 through the CLI (exit 2, one line, no traceback, nothing written) and
through the Python API (a library exception with the same message)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from conftest import run_cli
from dpadmm import (
    ConsensusLogisticRegression, DPADMMError, FunctionalQuantileRegressor, VerticalLogisticRegression,
)
from dpadmm.data import write_party_files


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    rng = np.random.default_rng(0)
    B = [rng.normal(size=(30, 3)), rng.normal(size=(30, 2))]
    y = np.where(np.arange(30) % 2 == 0, 1, -1)
    p1, p2 = write_party_files(B, y, d / "ok")
    df = pd.read_csv(p1)
    df["y"] = np.arange(30) % 3
    df.to_csv(d / "three_classes.csv", index=False)
    (d / "ragged.csv").write_text("id,y,a,b\n0,1,0.5,0.2\n1,-1,0.3\n2,1,0.1,0.2,0.9,0.4\n")
    (d / "a_directory").mkdir()
    (d / "g_disconnected.txt").write_text("0 1\n2 3\n")
    # a small LIBSVM file for consensus
    lines = [f"{'+1' if i % 2 else '-1'} 1:{rng.uniform(0, .5):.3f} 2:{rng.uniform(0, .5):.3f}" for i in range(40)]
    (d / "small.svm").write_text("\n".join(lines) + "\n")
    # functional CSV without the response column
    pd.DataFrame(rng.normal(size=(20, 8)), columns=[f"t{i}" for i in range(8)]).to_csv(d / "noresp.csv", index=False)
    return d, p1, p2


def _cli_case(files, case):
    d, p1, p2 = files
    return {
        "labels_not_binary": ["vertical", "admm", "--party", d / "three_classes.csv", "--party", p2, "--target", "binary"],
        "ragged_rows": ["vertical", "admm", "--party", d / "ragged.csv", "--party", p2],
        "unreadable_file": ["vertical", "admm", "--party", d / "a_directory", "--party", p2],
        "disconnected_graph": ["consensus", "madmm", "--data", d / "small.svm", "--nodes", "4", "--topology",
                               d / "g_disconnected.txt"],
        "zero_nodes": ["consensus", "madmm", "--data", d / "small.svm", "--nodes", "0"],
        "tau_outside": ["functional", "--simulate", "--n", "200", "--tau", "0"],
        "epsilon_nonpositive_functional": ["functional", "--simulate", "--n", "200", "--epsilon", "-0.5"],
        "delta_outside_functional": ["functional", "--simulate", "--n", "200", "--epsilon", "0.5", "--delta", "2"],
        "missing_response": ["functional", "--train", d / "noresp.csv", "--response-column", "y"],
        "epsilon_zero_vertical": ["vertical", "admm", "--party", p1, "--party", p2, "--epsilon", "0"],
        "delta_outside_vertical": ["vertical", "admm", "--party", p1, "--party", p2, "--epsilon", "1", "--delta", "-1"],
    }[case]


CASES = ["labels_not_binary", "ragged_rows", "unreadable_file", "disconnected_graph", "zero_nodes", "tau_outside",
         "epsilon_nonpositive_functional", "delta_outside_functional", "missing_response", "epsilon_zero_vertical",
         "delta_outside_vertical"]


@pytest.mark.parametrize("case", CASES)
def test_cli_bad_input(files, tmp_path, capsys, case):
    out = tmp_path / "out"
    code, stdout, err = run_cli([*_cli_case(files, case), "--iterations", "2", "--quiet", "--out", out], capsys)
    assert code == 2, (stdout, err)
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    assert not out.exists()


def test_api_and_cli_each_in_their_own_terms(files, capsys):
    """The same bad value is refused by the estimator in Python terms (``epsilon=0.0``) and by the CLI in
    CLI terms (``--epsilon 0``), each naming the parameter and the value."""
    rng = np.random.default_rng(1)
    B = [rng.normal(size=(20, 2)) / 3, rng.normal(size=(20, 2)) / 3]
    y = np.where(np.arange(20) % 2 == 0, 1, -1)
    cases = [
        (lambda: VerticalLogisticRegression(epsilon=0.0).fit(B, y),
         ["vertical", "admm", "--data", "a9a", "--epsilon", "0"], "epsilon"),
        (lambda: VerticalLogisticRegression(epsilon=1.0, delta=-1.0).fit(B, y),
         ["vertical", "admm", "--data", "a9a", "--epsilon", "1", "--delta", "-1"], "delta"),
        (lambda: FunctionalQuantileRegressor(tau=0.0).fit(rng.normal(size=(30, 10)), rng.normal(size=30)),
         ["functional", "--simulate", "--n", "200", "--tau", "0"], "tau"),
    ]
    for api, cli, name in cases:
        with pytest.raises(DPADMMError) as info:
            api()
        assert f"{name}=" in str(info.value) and f"--{name}" not in str(info.value)
        code, _, err = run_cli(cli + ["--quiet"], capsys)
        assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1
        assert f"--{name} must be" in err and f"{name}=" not in err, err


def test_api_graph_errors():
    X = np.random.default_rng(2).normal(size=(40, 2)) / 3
    y = np.where(np.arange(40) % 2 == 0, 1, -1)
    g = nx.Graph([(0, 1), (2, 3)])
    with pytest.raises(DPADMMError, match="connected"):
        ConsensusLogisticRegression(n_nodes=4, topology=g, max_iter=2).fit(X, y)
    with pytest.raises(DPADMMError):
        ConsensusLogisticRegression(n_nodes=0, max_iter=2).fit(X, y)
