"""The CLI helps: ``party serve --help`` names every protocol of the registry; piped progress lines name a phase."""

from __future__ import annotations

import time

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file

from conftest import run_cli


def test_party_serve_help_lists_every_registered_protocol(capsys, monkeypatch):
    from dpadmm.protocol import protocol_names

    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = run_cli(["party", "serve", "--help"], capsys)
    assert code == 0, err
    text = " ".join(out.split())
    names = protocol_names()
    assert len(names) >= 10
    missing = [n for n in names if n not in text]
    assert not missing, f"party serve --help does not name {missing}"


def test_piped_training_lines_name_the_phase_and_the_round(a9a_small, tmp_path, capsys, monkeypatch):
    from dpadmm.cli import _display as _common

    B, y, Bt, yt = a9a_small
    dump_svmlight_file(np.hstack(B), y, str(tmp_path / "train.svm"), zero_based=False)
    monkeypatch.setattr(_common, "_stderr_is_terminal", lambda: False)
    monkeypatch.setattr(_common, "PLAIN_PROGRESS_INTERVAL", 0.0)  # a line every round (the short run takes < 10 s)
    code, out, err = run_cli(["vertical", "admm", "--train", tmp_path / "train.svm", "--parties", "66,57",
                              "--iterations", "4", "--out", tmp_path / "run"], capsys)
    assert code == 0, err
    lines = [ln for ln in err.splitlines() if ln.startswith("vertical ADMM: ") and " round 0/" not in ln]
    assert lines and lines[0].startswith("vertical ADMM: training: round 1/4, ") and " s elapsed" in lines[0], err
    assert "s left" in lines[0]


def test_piped_heartbeat_names_the_phase(capsys, monkeypatch):
    from dpadmm.cli import _display as _common

    monkeypatch.setattr(_common, "_stderr_is_terminal", lambda: False)
    with _common.heartbeat("dpadmm vertical", interval=0.05):
        _common.phase("PSI alignment")
        time.sleep(0.3)
    err = capsys.readouterr().err
    assert "dpadmm vertical: PSI alignment, 0 s elapsed" in err, err


def _help(words):
    import os
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[2] / "src")
    env = dict(os.environ, COLUMNS="80", NO_COLOR="1", PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "dpadmm", *words, "--help"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("command", ["vertical admm", "vertical experts", "vertical encrypted", "consensus gossip",
                                     "consensus madmm",
                                     "functional"])
def test_help_fits_on_a_screenful_and_keeps_every_option(command):
    """At 80 columns each option's help is one short line, grouped in panels: at most 120 lines in all."""
    import typer.main

    from dpadmm.cli import app

    text = _help(command.split())
    lines = text.splitlines()
    assert len(lines) <= 120, f"dpadmm {command} --help prints {len(lines)} lines at 80 columns"
    click_cmd = typer.main.get_command(app)
    for word in command.split():
        click_cmd = click_cmd.commands[word]
    names = [o for p in click_cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")]
    assert len(names) > 10
    missing = [n for n in names if n not in text]
    assert not missing, f"dpadmm {command} --help does not show {missing}"
    assert sum(1 for ln in lines if ln.startswith("╭─")) >= 3  # options grouped in panels


@pytest.mark.slow  # ~3 CPU-seconds: the default suite stays under 3 CPU-minutes (CI runs the slow suite too)
def test_resume_of_a_completed_run_says_so(a9a_small, tmp_path, capsys):
    B, y, Bt, yt = a9a_small
    dump_svmlight_file(np.hstack(B), y, str(tmp_path / "train.svm"), zero_based=False)
    base = ["vertical", "admm", "--train", tmp_path / "train.svm", "--parties", "66,57", "--checkpoint-every", "1",
            "--out", tmp_path / "run", "--quiet"]
    code, out, err = run_cli([*base, "--iterations", "2"], capsys)
    assert code == 0, err
    assert "already complete" not in out
    code, out, err = run_cli([*base, "--iterations", "3", "--resume", tmp_path / "run"], capsys)
    assert code == 0, err
    assert "already complete" not in out  # one more round to train
    code, out, err = run_cli([*base, "--iterations", "3", "--resume", tmp_path / "run"], capsys)
    assert code == 0, err
    assert "--resume: the run checkpointed in" in out and "is already complete (3 of 3 rounds)" in out, out


def test_consensus_resume_of_a_completed_run_says_so(tmp_path, capsys):
    """``dpadmm consensus --epsilon`` (gossip) checkpoints and resumes like ``vertical``, with the same line for a
    completed run; the resumed model is the checkpointed run's."""
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.integers(1990, 2011, 300), rng.gamma(2.0, 20.0, 300)]).astype(float)
    y = np.where(0.2 * (X[:, 0] - 2000) - 0.03 * (X[:, 1] - 40) + rng.normal(size=300) > 0, 1, 0)
    dump_svmlight_file(X, y, str(tmp_path / "train.svm"), zero_based=False)
    base = ["consensus", "gossip", "--data", tmp_path / "train.svm", "--epsilon", "2", "--nodes", "3", "--seed", "0",
            "--checkpoint-every", "1", "--out", tmp_path / "run", "--quiet"]
    code, out, err = run_cli([*base, "--iterations", "2"], capsys)
    assert code == 0, err
    assert "already complete" not in out
    code, out, err = run_cli([*base, "--iterations", "3", "--resume", tmp_path / "run"], capsys)
    assert code == 0, err
    assert "already complete" not in out  # one more round to train
    first = np.load(tmp_path / "run" / "model.npz")["coefs"]
    code, out, err = run_cli([*base, "--iterations", "3", "--resume", tmp_path / "run"], capsys)
    assert code == 0, err
    assert "--resume: the run checkpointed in" in out and "is already complete (17 of 17 rounds)" in out, out
    np.testing.assert_array_equal(np.load(tmp_path / "run" / "model.npz")["coefs"], first)


def test_consensus_m_admm_refuses_checkpoints_with_the_reason(tmp_path, capsys):
    code, _, err = run_cli(["consensus", "madmm", "--perturbation", "pp", "--epsilon", "2", "--resume", tmp_path], capsys)
    # M-ADMM's DP base-rate fallback releases after the rounds, outside a checkpoint: the command has no --resume
    assert code == 2 and "has no option --resume" in err and "belongs to `dpadmm consensus gossip`" in err, err
