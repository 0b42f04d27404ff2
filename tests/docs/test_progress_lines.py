"""Piped output says where a run is: phase, round k/T and the time left, for every long-running command.

Run through the CLI (stderr is a pipe here) with ``DPADMM_PROGRESS_INTERVAL`` set tiny, so that a line is printed at
the end of every round whatever the machine's speed: no test depends on how long anything takes. The last line never
counts more rounds than the run declared.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file

from conftest import run_cli
from doc_pages import ROOT
from dpadmm.cli._display import final_line

ROUND = re.compile(r"^(?P<desc>[^:]+): (?P<phase>[^:]+): round (?P<k>\d+)/(?P<T>\d+), \d+ s elapsed, ~\d+ s left")
FINAL = re.compile(r"^[^:]+: (done, (?P<k>\d+)/(?P<T>\d+) rounds|stopped early at round (?P<k2>\d+) of (?P<T2>\d+))")


@pytest.fixture
def every_round(monkeypatch):
    monkeypatch.setenv("DPADMM_PROGRESS_INTERVAL", "1e-6")


def _round_lines(err: str) -> list[re.Match]:
    return [m for m in map(ROUND.match, err.splitlines()) if m]


def _check_final(err: str, total: int) -> None:
    finals = [m for m in map(FINAL.match, err.splitlines()) if m]
    assert len(finals) == 1, err[-3000:]
    k, T = (int(finals[0]["k"] or finals[0]["k2"]), int(finals[0]["T"] or finals[0]["T2"]))
    assert T == total and k <= T, finals[0].group(0)


def _libsvm(path, n=300, d=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, size=(n, d)) / np.sqrt(d)
    y = np.where((X - X.mean(axis=0)) @ rng.normal(size=d) > 0, 1, -1)
    dump_svmlight_file(X, y, str(path), zero_based=False)
    return path


def test_vertical_admm(a9a_small, tmp_path, capsys, every_round):
    B, y, _, _ = a9a_small
    dump_svmlight_file(np.hstack([b.toarray() if hasattr(b, "toarray") else b for b in B]), y,
                       str(tmp_path / "train.svm"), zero_based=False)
    code, out, err = run_cli(["vertical", "admm", "--train", tmp_path / "train.svm", "--parties", "66,57",
                              "--normalize-rows", "--epsilon", "1", "--iterations", "6", "--out", tmp_path / "run"],
                             capsys)
    assert code == 0, err
    lines = _round_lines(err)
    assert len(lines) >= 2 and {m["phase"] for m in lines} == {"training"}, err
    assert all(m["desc"] == "vertical ADMM" and m["T"] == "6" for m in lines)
    _check_final(err, 6)


def test_consensus_gossip_counts_its_range_rounds(tmp_path, capsys, every_round):
    data = _libsvm(tmp_path / "d.svm")
    code, out, err = run_cli(["consensus", "gossip", "--data", data, "--nodes", "3", "--epsilon", "2", "--iterations", "4",
                              "--seed", "0", "--out", tmp_path / "run"], capsys)
    assert code == 0, err
    lines = _round_lines(err)
    phases = [m["phase"] for m in lines]
    # 14 DP range rounds first, then the 4 training rounds: 18 in all, and the total says so
    assert "range estimate" in phases and "training" in phases and phases.index("training") > phases.index(
        "range estimate"), err
    assert {m["T"] for m in lines} == {"18"}
    _check_final(err, 18)


def test_consensus_madmm(tmp_path, capsys, every_round):
    data = _libsvm(tmp_path / "d.svm")
    code, out, err = run_cli(["consensus", "madmm", "--data", data, "--nodes", "3", "--perturbation", "pp", "--iterations",
                              "5", "--runs", "2", "--seed", "0", "--out", tmp_path / "run"], capsys)
    assert code == 0, err
    lines = _round_lines(err)
    assert len(lines) >= 2 and {m["T"] for m in lines} == {"10"}, err
    _check_final(err, 10)


def test_functional(tmp_path, capsys, every_round):
    code, out, err = run_cli(["functional", "--simulate", "--n", "600", "--workers", "2", "--iterations", "5",
                              "--seed", "0", "--out", tmp_path / "run"], capsys)
    assert code == 0, err
    lines = _round_lines(err)
    assert len(lines) >= 2 and {m["phase"] for m in lines} == {"training"}, err
    _check_final(err, 5)


def test_phases_without_rounds_are_named(tmp_path, capsys, every_round, monkeypatch):
    """Experts has no rounds: while no round display runs, the command's phase is on every piped line. Each phase is
    held 0.3 s (six of the display thread's wake-ups), so lines are printed however fast the machine runs the fit."""
    import dpadmm._progress as progress_state

    status = progress_state.status

    def held(text, *a, **k):
        status(text, *a, **k)
        time.sleep(0.3)

    monkeypatch.setattr(progress_state, "status", held)
    data = _libsvm(tmp_path / "d.svm", n=2000, d=8)
    code, out, err = run_cli(["vertical", "experts", "--train", data, "--parties", "4,4",
                              "--normalize-rows", "--epsilon", "1", "--seed", "0"], capsys)
    assert code == 0, err
    named = {ln.split(": ", 1)[1].rsplit(", ", 1)[0] for ln in err.splitlines() if ln.startswith("dpadmm vertical experts: ")}
    assert named and not any(re.fullmatch(r"\d+ s elapsed", n) for n in named), err  # never a line without a phase


def test_the_last_line_never_counts_more_rounds_than_declared():
    assert final_line("x", 100, 100, 3.0) == "x: done, 100/100 rounds in 3 s"
    assert final_line("x", 64, 100, 3.0) == "x: stopped early at round 64 of 100, after 3 s"
    assert "/" not in final_line("x", 414, 400, 3.0)


def test_a_bad_interval_is_one_error_line(monkeypatch, capsys):
    monkeypatch.setenv("DPADMM_PROGRESS_INTERVAL", "soon")
    code, out, err = run_cli(["functional", "--simulate", "--n", "600", "--iterations", "2"], capsys)
    assert code == 2 and err.strip().count("\n") == 0, err
    assert "DPADMM_PROGRESS_INTERVAL='soon' is not a positive number of seconds" in err


@pytest.mark.slow
def test_demo_on_a_pipe_names_phase_round_and_time_left(tmp_path):
    """The demo (about 3 minutes on a loaded machine), piped as a user would: phase, round k/T, time left."""
    env = {"DPADMM_PROGRESS_INTERVAL": "1e-6", "PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "dpadmm", "demo", "--out", str(tmp_path / "demo")],
                          capture_output=True, text=True, env=env, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = _round_lines(done.stderr)
    assert {m["desc"] for m in lines} >= {"non-private ADMM"} and len(lines) >= 2, done.stderr[-3000:]
    assert any(ln.startswith("dpadmm demo: baselines") for ln in done.stderr.splitlines()), done.stderr[-3000:]


def test_encrypted_rounds_name_phase_round_and_time_left(capsys, every_round):
    """An encrypted run (in-process, the plaintext HE layer: the same integers, fast) through the estimator with the
    CLI's progress display on a pipe: every round's line names the phase, round k/T and the time left."""
    from dpadmm.cli._display import progress
    from dpadmm.estimators.vertical_encrypted import VerticalEncryptedClassifier
    from dpadmm.experiments.audit_games_encrypted import plaintext_he

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    y = np.where(X @ np.array([1.0, -1.0, 0.5, 2.0]) > 0, 1, 0)
    with plaintext_he(), progress(6, "vertical encrypted") as cb:
        VerticalEncryptedClassifier(epsilon=1.0, label_epsilon=1.0, party_sizes=[2, 2], rounds=6,
                                    random_state=0).fit(X, y, callbacks=[cb])
    err = capsys.readouterr().err
    lines = _round_lines(err)
    assert len(lines) >= 2 and {m["phase"] for m in lines} == {"training"}, err
    assert all(m["desc"] == "vertical encrypted" and m["T"] == "6" for m in lines), err
    assert [int(m["k"]) for m in lines] == sorted(int(m["k"]) for m in lines) and int(lines[-1]["k"]) <= 5, err
    _check_final(err, 6)
