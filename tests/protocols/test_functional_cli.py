"""``dpadmm functional`` end to end (simulation, CSV, the real fertility data) and every bad input:
exit 2, one line, nothing written; ``dpadmm reproduce zhou-*`` in quick mode."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import run_cli
from dpadmm.data.functional import FunctionalData, simulate_zhou, write_functional_csv


@pytest.fixture(scope="module")
def csv_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("fdata")
    sim = simulate_zhou(1200, tau=0.5, grid_size=40, random_state=0)
    tr = FunctionalData(sim.curves[:1000], sim.y[:1000], sim.grid, ids=np.arange(1000))
    te = FunctionalData(sim.curves[1000:], sim.y[1000:], sim.grid, ids=np.arange(1000, 1200))
    write_functional_csv(d / "train.csv", tr, response_column="resp")
    write_functional_csv(d / "test.csv", te, response_column="resp")
    lines = (d / "train.csv").read_text().splitlines()
    (d / "ragged.csv").write_text("\n".join(lines[:5] + [lines[5].rsplit(",", 3)[0]] + lines[6:20]) + "\n")
    nan = lines[:3] + [lines[3].replace(lines[3].split(",")[4], "", 1)] + lines[4:20]
    (d / "nan.csv").write_text("\n".join(nan) + "\n")
    (d / "tiny.csv").write_text("\n".join(lines[:4]) + "\n")
    return d


def test_simulate_end_to_end(tmp_path, capsys):
    out = tmp_path / "sim"
    code, stdout, err = run_cli(["functional", "--simulate", "--n", "3000", "--workers", "3", "--iterations", "15",
                                 "--epsilon", "0.5", "--delta", "1e-5", "--out", str(out), "--quiet", "--monitor"], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["final"]["mise"] > 0 and m["final"]["baseline_mise"] > 0
    assert m["final"]["test_pinball_loss"] > 0
    assert m["privacy"]["private"] and m["privacy"]["epsilon"] > 0 and m["privacy"]["rounds"] == 15
    assert len(m["history"]["empirical_loss"]) == 15
    assert m["config"]["workers"] == 3
    assert (out / "beta.csv").is_file() and (out / "functional.png").is_file()
    assert "centralised QR" in stdout


def test_csv_train_test_end_to_end(csv_files, tmp_path, capsys):
    out = tmp_path / "csv"
    code, stdout, err = run_cli(["functional", "--train", str(csv_files / "train.csv"), "--test",
                                 str(csv_files / "test.csv"), "--response-column", "resp", "--workers", "2",
                                 "--components", "4", "--penalty", "elasticnet", "--tau", "0.75", "--total-epsilon",
                                 "3", "--iterations", "10", "--out", str(out), "--quiet"], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["config"]["n_train"] == 1000 and m["config"]["n_test"] == 200 and m["config"]["grid_points"] == 40
    assert m["privacy"]["epsilon"] <= 3.0 + 1e-9
    assert "mise" not in m["final"]


def test_real_dataset_end_to_end(tmp_path, capsys):
    out = tmp_path / "fert"
    code, stdout, err = run_cli(["functional", "--dataset", "fertility", "--workers", "4", "--components", "4",
                                 "--tau", "0.5", "--out", str(out), "--quiet"], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["config"]["n_train"] + m["config"]["n_test"] == 192
    # non-private fit close to the centralised floor on held-out data
    assert m["final"]["test_pinball_loss"] < 1.2 * m["final"]["baseline_test_pinball_loss"]
    assert m["final"]["worse_than_constant"] is False
    assert m["final"]["train_pinball_loss"] < m["final"]["constant_train_pinball_loss"]


def test_far_from_zero_dataset_and_worse_than_constant_flag(tmp_path, capsys):
    """The temperature data (response ≈ 60 °F): a non-private fit close to centralised QR; a useless fit
    (tiny ε) is flagged in metrics.json and on the console."""
    out = tmp_path / "temp"
    code, stdout, err = run_cli(["functional", "--dataset", "temperature", "--workers", "4", "--components", "5",
                                 "--tau", "0.9", "--out", str(out), "--quiet"], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["final"]["test_pinball_loss"] <= 1.1 * m["final"]["baseline_test_pinball_loss"]
    out2 = tmp_path / "temp-bad"
    code, stdout, err = run_cli(["functional", "--dataset", "temperature", "--workers", "4", "--epsilon", "0.01",
                                 "--y-range", "30,90", "--curve-clip", "400", "--iterations", "5", "--out", str(out2),
                                 "--seed", "0", "--quiet"], capsys)  # seeded: unseeded, the hand-over failed once in 18 runs
    assert code == 0, err
    m2 = json.loads((out2 / "metrics.json").read_text())
    assert m2["final"]["worse_than_constant"] is True
    # the useless model is not handed over: the DP constant is, inside the public range, and the run says so
    assert "handed over: the DP 0.5-quantile" in stdout and m2["final"]["handed_over"] == "dp-constant"
    assert 30.0 <= m2["final"]["dp_constant"] <= 90.0 and m2["final"]["test_predictions_in_range"] == 1.0


@pytest.mark.parametrize("case", ["ragged", "nan", "tau", "workers", "components", "missing", "sources"])
def test_bad_input_exit_2_one_line_nothing_written(csv_files, tmp_path, capsys, case):
    base = ["functional", "--response-column", "resp", "--iterations", "3", "--quiet"]
    args = {
        "ragged": ["--train", str(csv_files / "ragged.csv")],
        "nan": ["--train", str(csv_files / "nan.csv")],
        "tau": ["--train", str(csv_files / "train.csv"), "--tau", "1.5"],
        "workers": ["--train", str(csv_files / "tiny.csv"), "--workers", "5"],
        "components": ["--train", str(csv_files / "train.csv"), "--components", "41"],
        "missing": ["--train", str(csv_files / "nope.csv")],
        "sources": ["--train", str(csv_files / "train.csv"), "--simulate"],
    }[case]
    out = tmp_path / "never"
    code, stdout, err = run_cli(base + args + ["--out", str(out)], capsys)
    assert code == 2, (stdout, err)
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["zhou-table1", "zhou-table6", "zhou-fig1", "zhou-fig2", "zhou-fig6"])
def test_reproduce_quick(tmp_path, capsys, name):
    out = tmp_path / name
    code, stdout, err = run_cli(["reproduce", name, "--out", str(out), "--quick", "--reps", "1"], capsys)
    assert code == 0, err
    if "table" in name:
        import pandas as pd

        df = pd.read_csv(out / "table.csv")
        assert len(df) == 105
        for col in ("M", "penalty", "epsilon", "delta", "tau", "ours_mise", "paper_mise", "total_epsilon"):
            assert col in df.columns
        assert np.isfinite(df.loc[np.isfinite(df["epsilon"]), "total_epsilon"]).all()
        assert (out / "table.png").is_file()
    else:
        assert any(p.suffix == ".png" for p in out.iterdir())


@pytest.mark.slow  # starts party processes (the gRPC test of the same numbers stays in the default suite)
def test_functional_cli_process_backend_same_numbers(tmp_path):
    """--backend process gives the in-process result (same seed, DP on)."""
    import json

    from dpadmm.cli import main

    outs = []
    for backend in ("inprocess", "process"):
        out = tmp_path / backend
        code = main(["functional", "--simulate", "--n", "2000", "--workers", "2", "--iterations", "5",
                     "--epsilon", "1.0", "--quiet", "--backend", backend, "--out", str(out), "--seed", "0"])
        assert code == 0
        outs.append(json.loads((out / "metrics.json").read_text()))
    assert outs[0]["final"]["test_pinball_loss"] == outs[1]["final"]["test_pinball_loss"]
    assert outs[1]["config"]["backend"] == "process"
