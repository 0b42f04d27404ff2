"""The CLI end to end on small data, and every bad input: exit 2, one line, nothing written."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file

from conftest import run_cli, run_cli_once
from dpadmm.data import write_party_files


@pytest.fixture(scope="module")
def small_files(tmp_path_factory, a9a_small):
    B, y, Bt, yt = a9a_small
    d = tmp_path_factory.mktemp("data")
    dump_svmlight_file(np.hstack(B), y, str(d / "train.svm"), zero_based=False)
    dump_svmlight_file(np.hstack(Bt), yt, str(d / "test.svm"), zero_based=False)
    parties = write_party_files(B, y, d / "parties")
    tparties = write_party_files(Bt, yt, d / "test_parties")
    return d, parties, tparties


def test_vertical_libsvm_end_to_end(small_files, tmp_path, capsys):
    d, _, _ = small_files
    out = tmp_path / "run"
    code, stdout, err = run_cli(["vertical", "admm", "--train", d / "train.svm", "--test", d / "test.svm",
                                 "--parties", "66,57", "--iterations", "30", "--out", out, "--quiet"], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    for key in ("objective", "seconds", "test_log_loss"):
        assert len(m["history"][key]) == m["final"]["iterations"]
    assert m["final"]["test_log_loss"] < 0.4 and m["final"]["test_accuracy"] > 0.8 and m["final"]["test_auc"] > 0.85
    assert m["privacy"]["private"] is False and m["privacy"]["epsilon"] == "inf"
    assert m["privacy"]["label"]["protected"] is False
    assert "every party can read the training labels" in " ".join(stdout.split())
    assert m["config"]["party_sizes"] == [66, 57] and m["config"]["lam"] == 1e-3
    assert (out / "convergence.png").stat().st_size > 1000
    assert "training objective" in stdout


def test_vertical_party_files_dp(small_files, tmp_path, capsys):
    _, parties, tparties = small_files
    out = tmp_path / "dp"
    args = ["vertical", "admm", "--iterations", "5", "--epsilon", "20", "--delta", "1e-5", "--normalize-rows",
            "--rho", "0.3", "--out", out, "--quiet"]
    for p in parties:
        args += ["--party", p]
    for p in tparties:
        args += ["--test-party", p]
    code, stdout, err = run_cli(args, capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    p = m["privacy"]
    assert p["private"] and 19.0 < p["epsilon"] <= 20.0 and p["delta"] == 1e-5
    assert p["accountant"].startswith("dp-accounting") and p["relation"] == "feature_column"
    assert {r["party"] for r in p["releases"]} == {"party1", "party2"}
    flat = " ".join(stdout.split())
    assert "C=" in flat and "sigma=" in flat and "read the training labels" in flat


def test_vertical_cli_paper_mechanism_and_label_epsilon(small_files, tmp_path, capsys):
    d, _, _ = small_files
    base = ["vertical", "admm", "--train", d / "train.svm", "--test", d / "test.svm", "--parties", "66,57",
            "--normalize-rows", "--quiet"]
    out = tmp_path / "paper"
    code, stdout, err = run_cli(base + ["--mechanism", "paper", "--epsilon", "5", "--iterations", "3",
                                        "--rho", "0.3", "--out", out], capsys)
    assert code == 0, err
    p = json.loads((out / "metrics.json").read_text())["privacy"]
    assert p["epsilon"] == "inf" and "range(D_m)" in p["notes"][0]
    assert "not differentially private" in " ".join(stdout.split())
    out = tmp_path / "label"
    code, stdout, err = run_cli(base + ["--label-epsilon", "1", "--out", out], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    lab = m["privacy"]["label"]
    # default: randomized response, pure label epsilon, released once; ADMM on the released labels
    assert lab["protected"] and lab["epsilon"] == 1.0 and lab["delta"] == 0.0
    assert lab["flip_probability"] == pytest.approx(1 / (1 + np.e))
    assert lab["relation"] == "label" and "passive party" in lab["threat_model"]
    assert m["privacy"]["epsilon"] == "inf"
    assert "labels: ε = 1 at δ = 0" in " ".join(stdout.split())
    out = tmp_path / "label-gaussian"
    code, stdout, err = run_cli(base + ["--label-epsilon", "1", "--label-mechanism", "gaussian", "--out", out], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    lab = m["privacy"]["label"]
    assert lab["protected"] and 0.9 < lab["epsilon"] <= 1.0 and lab["delta"] == 1e-5
    assert m["final"]["iterations"] == 3 and "labels: ε = " in " ".join(stdout.split())


def _bad_cases(d, parties, tmp):
    p1, p2 = parties
    import pandas as pd

    nan = tmp / "nan.csv"
    df = pd.read_csv(p2)
    df.loc[1, df.columns[1]] = np.nan
    df.to_csv(nan, index=False)
    mism = tmp / "mism.csv"
    df = pd.read_csv(p2)
    df.loc[0, "id"] = -5
    df.to_csv(mism, index=False)
    empty = tmp / "empty.csv"
    empty.write_text("")
    nolabel = tmp / "nolabel.csv"
    pd.read_csv(p1).drop(columns=["y"]).to_csv(nolabel, index=False)
    short = tmp / "short.csv"
    pd.read_csv(p2).iloc[:-3].to_csv(short, index=False)
    return {
        "nan": ["--party", p1, "--party", nan],
        "ids_mismatch": ["--party", p1, "--party", mism],
        "shape_mismatch": ["--party", p1, "--party", short],
        "empty_party": ["--party", p1, "--party", empty],
        "missing_label": ["--party", nolabel, "--party", p2],
        "parties_sum": ["--train", d / "train.svm", "--parties", "60,57"],
        "epsilon_zero": ["--train", d / "train.svm", "--parties", "66,57", "--epsilon", "0", "--normalize-rows"],
        "epsilon_negative": ["--train", d / "train.svm", "--parties", "66,57", "--epsilon", "-1"],
        "delta_one": ["--train", d / "train.svm", "--parties", "66,57", "--epsilon", "1", "--delta", "1.5"],
        "delta_zero": ["--train", d / "train.svm", "--parties", "66,57", "--epsilon", "1", "--delta", "0"],
        "missing_file": ["--train", d / "nope.svm", "--parties", "66,57"],
        "unnormalised_dp": ["--train", d / "train.svm", "--parties", "66,57", "--epsilon", "1", "--mechanism", "paper"],
        "bad_mechanism": ["--train", d / "train.svm", "--parties", "66,57", "--epsilon", "1", "--mechanism", "hu"],
        "bad_relation": ["--train", d / "train.svm", "--parties", "66,57", "--epsilon", "1", "--relation", "row"],
        "label_epsilon_zero": ["--train", d / "train.svm", "--parties", "66,57", "--label-epsilon", "0"],
        "bad_parties": ["--train", d / "train.svm", "--parties", "a,b"],
    }


@pytest.fixture(scope="module")
def bad_cases(small_files, tmp_path_factory):
    """The bad party files written once for the module (pandas' CSV writer was most of each case's time)."""
    d, parties, _ = small_files
    return _bad_cases(d, parties, tmp_path_factory.mktemp("bad"))


@pytest.mark.parametrize("case", ["nan", "ids_mismatch", "shape_mismatch", "empty_party", "missing_label",
                                  "parties_sum", "epsilon_zero", "epsilon_negative", "delta_one", "delta_zero",
                                  "missing_file", "unnormalised_dp", "bad_parties", "bad_mechanism",
                                  "bad_relation", "label_epsilon_zero"])
def test_bad_input_exit_2_one_line_nothing_written(bad_cases, tmp_path, capsys, case):
    args = bad_cases[case]
    out = tmp_path / "out"
    code, stdout, err = run_cli(["vertical", "admm", *args, "--iterations", "3", "--out", out, "--quiet"], capsys)
    assert code == 2
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    assert not out.exists()


def test_console_script_subprocess(small_files, tmp_path):
    """The installed entry point: bad input → exit 2, no traceback (a real process)."""
    import subprocess
    import sys

    d, _, _ = small_files
    r = subprocess.run([sys.executable, "-m", "dpadmm", "vertical", "admm", "--train", str(d / "train.svm"),
                        "--parties", "66,57", "--epsilon", "-3", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip() == "error: --epsilon must be positive, got --epsilon -3; run 'dpadmm vertical admm --help' for usage."
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_demo_end_to_end(tmp_path, capsys):
    # the README's first command: test_readme_commands and test_readme_numbers check the same run
    code, stdout, err, written = run_cli_once(["demo", "--out", tmp_path / "demo", "--quiet"], capsys)
    out = written["--out"]
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["privacy"]["label"]["protected"] and m["privacy"]["label"]["epsilon"] <= 1.0
    assert m["final"]["test_log_loss"] < 0.36
    assert {"admm_nonprivate", "sklearn_all_features", "sklearn_label_party_alone"} <= set(m["baselines"])
    assert (out / "convergence.png").exists()
    assert "label party alone" in stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hu-fig1", "hu-fig2", "hu-fig3", "vertical-privacy"])
def test_reproduce_quick(tmp_path, capsys, name):
    # the README's commands (with --quiet): test_readme_commands checks the same run
    code, stdout, err, written = run_cli_once(["reproduce", name, "--out", tmp_path / name, "--quick", "--quiet"],
                                              capsys)
    out = written["--out"]
    assert code == 0, err
    assert any(p.suffix == ".png" for p in out.iterdir()) and any(p.suffix == ".csv" for p in out.iterdir())


def test_reproduce_unknown_name(tmp_path, capsys):
    code, _, err = run_cli(["reproduce", "hu-fig9", "--out", tmp_path / "x"], capsys)
    assert code == 2 and "unknown reproduction" in err and not (tmp_path / "x").exists()


def test_bundled_data_option(tmp_path, capsys):
    code, _, err = run_cli(["vertical", "admm", "--data", "mnist", "--out", tmp_path / "o", "--quiet"], capsys)
    assert code == 2 and "--data must be 'a9a'" in err and not (tmp_path / "o").exists()


@pytest.mark.slow  # all of a9a and its scikit-learn baseline; the default suite runs --data a9a in test_privacy.py
def test_bundled_data_a9a_runs(capsys):
    code, stdout, err = run_cli(["vertical", "admm", "--data", "a9a", "--iterations", "3", "--quiet"], capsys)
    assert code == 0, err
    assert "test log loss" in stdout
