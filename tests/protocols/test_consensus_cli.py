"""`dpadmm consensus madmm`, `dpadmm attack kkt` and `dpadmm reproduce zhang-*` end to end."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from conftest import run_cli_once
from dpadmm.cli import main


def _libsvm(path, n=120, d=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, size=(n, d)) / np.sqrt(d)
    y = np.where((X - X.mean(axis=0)) @ rng.normal(size=d) > 0, 1, -1)
    with open(path, "w") as fh:
        for xi, yi in zip(X, y):
            fh.write(f"{yi:+d} " + " ".join(f"{j + 1}:{v:.6f}" for j, v in enumerate(xi)) + "\n")
    return path


def test_consensus_end_to_end(tmp_path, capsys):
    data = _libsvm(tmp_path / "d.svm")
    edges = tmp_path / "g.txt"
    edges.write_text("0 1\n1 2\n2 3\n3 0\n0 2\n")
    out = tmp_path / "run"
    code = main(["consensus", "madmm", "--data", str(data), "--nodes", "4", "--topology", str(edges), "--perturbation", "pp",
                 "--eta", "0.5", "--eta-growth", "1.05", "--alpha", "5", "--alpha-growth", "1.05", "--C", "2",
                 "--reg-weight", "0.5", "--iterations", "8", "--runs", "3", "--seed", "1", "--out", str(out), "--quiet",
                 "--monitor"])  # the training loss L(t) of a private run: monitoring only (issue 35)
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == ["convergence.png", "metrics.json", "model.npz"]
    m = json.loads((out / "metrics.json").read_text())
    tl = m["history"]["train_loss"]
    assert len(tl["mean"]) == len(tl["min"]) == len(tl["max"]) == 8
    assert all(lo <= mu <= hi for lo, mu, hi in zip(tl["min"], tl["mean"], tl["max"]))
    assert tl["min"][-1] < tl["max"][-1]  # independent runs really differ
    pb = m["history"]["privacy_bound"]
    assert len(pb) == 8 and all(a < b for a, b in zip(pb, pb[1:]))
    assert m["final"]["privacy_bound"] == pytest.approx(pb[-1])
    for key in ("nodes", "C", "reg_weight", "theta", "eta", "eta_growth", "alpha", "alpha_growth", "iterations", "runs",
                "topology", "split", "perturbation", "seed"):
        assert key in m["config"], key
    assert m["config"]["nodes"] == 4 and m["config"]["C"] == 2.0 and m["config"]["edges"] == 5
    assert "P(T)" in capsys.readouterr().out


@pytest.mark.parametrize("args,message", [
    (["--alpha", "-1", "--perturbation", "pp"], "alpha must be positive"),
    (["--perturbation", "pvp"], "needs --alpha"),
    (["--perturbation", "pp", "--epsilon", "1", "--alpha", "3"], "not both"),
    (["--perturbation", "pp", "--epsilon", "0.4", "--fallback-epsilon", "0.5"], "must exceed --fallback-epsilon"),
    (["--epsilon", "1"], "--epsilon needs --perturbation pp or dvp"),
    (["--test-fraction", "1.5"], "--test-fraction must be in"),
    (["--test", "/nonexistent.svm"], "test file not found"),
    (["--nodes", "1"], "nodes must be an integer >= 2"),
    (["--topology", "torus"], "topology must be"),
    (["--data", "/nonexistent.svm"], "--data /nonexistent.svm: file not found"),
    (["--perturbation", "dvp", "--alpha", "3", "--eta", "0.7"], "fixes eta"),
])
def test_consensus_bad_input_exit_2_nothing_written(tmp_path, capsys, args, message):
    data = _libsvm(tmp_path / "d.svm")
    out = tmp_path / "never"
    base = ["consensus", "madmm", "--data", str(data), "--iterations", "2", "--out", str(out), "--quiet"]
    code = main(base + args)
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_disconnected_edge_list_exit_2(tmp_path, capsys):
    data = _libsvm(tmp_path / "d.svm")
    edges = tmp_path / "g.txt"
    edges.write_text("0 1\n2 3\n")
    out = tmp_path / "never"
    code = main(["consensus", "madmm", "--data", str(data), "--nodes", "4", "--topology", str(edges), "--out", str(out), "--quiet"])
    assert code == 2 and "connected" in capsys.readouterr().err and not out.exists()


def test_theta_condition_exit_2(tmp_path, capsys):
    data = _libsvm(tmp_path / "d.svm", n=40)
    out = tmp_path / "never"
    code = main(["consensus", "madmm", "--data", str(data), "--nodes", "4", "--perturbation", "pp", "--alpha", "3", "--C", "500",
                 "--theta", "0.01", "--eta", "0.5", "--reg-weight", "0.01", "--out", str(out), "--quiet"])
    assert code == 2 and "Alg. 1" in capsys.readouterr().err and not out.exists()


def test_attack_kkt_cli(tmp_path, capsys):
    out = tmp_path / "atk"
    code = main(["attack", "kkt", "--samples", "400", "--iterations", "20", "--out", str(out)])
    assert code == 0
    res = json.loads((out / "attack.json").read_text())["results"]
    assert [r["scenario"] for r in res] == ["eta public, no noise", "eta private, no noise", "eta public, PP noise"]
    assert res[0]["cosine"] > 0.9
    assert main(["attack", "kkt", "--node", "7", "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_reproduce_zhang_fig2_quick(tmp_path):
    out = tmp_path / "fig2"
    assert main(["reproduce", "zhang-fig2", "--quick", "--out", str(out)]) == 0
    with open(out / "summary.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["method", "label", "final_loss_mean", "final_loss_range", "final_privacy_bound"]
    assert {r["method"] for r in rows} == {"pp", "dvp"} and len(rows) == 8
    assert (out / "fig2_alpha3.png").exists() and (out / "fig2_alpha5.csv").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["zhang-fig1", "zhang-fig3", "zhang-fig4", "zhang-attack"])
def test_reproduce_quick(tmp_path, capsys, name):
    # zhang-fig1 --quick is a README command: test_readme_commands checks the same run
    code, _, err, written = run_cli_once(["reproduce", name, "--quick", "--out", tmp_path / name, "--quiet"], capsys)
    assert code == 0, err
    out = written["--out"]
    assert any(p.suffix == ".png" for p in out.iterdir()) and any(p.suffix in (".csv", ".json") for p in out.iterdir())


@pytest.mark.slow  # a whole run end to end: CI runs it; the default suite stays under 3 CPU-minutes
def test_consensus_cli_process_backend_matches_inprocess(tmp_path):
    """--backend process (one OS process per node) reaches the in-process batched result without noise."""
    import json

    from dpadmm.cli import main

    res = []
    for backend in ("inprocess", "process"):
        out = tmp_path / backend
        code = main(["consensus", "madmm", "--nodes", "3", "--topology", "line", "--iterations", "5", "--quiet",
                     "--backend", backend, "--out", str(out)])
        assert code == 0
        res.append(json.loads((out / "metrics.json").read_text()))
    a, b = (r["history"]["train_loss"]["mean"] for r in res)
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-9
    assert res[1]["config"]["backend"] == "process"
