"""What the CLI prints when its output is piped: no wrapped numbers, progress lines on stderr,
each distinct warning once, a verdict when the model is worse than a trivial one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _run(args, **kw):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PYTHONPATH"] = SRC + os.pathsep + os.environ.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "dpadmm", *args], capture_output=True, text=True, env=env,
                          timeout=900, **kw)


def test_plain_progress_lines_when_not_a_terminal(capsys, monkeypatch):
    from dpadmm.cli import _display as _common

    monkeypatch.setattr(_common, "_stderr_is_terminal", lambda: False)
    with _common.progress(5, "job", interval=0.0) as cb:
        for t in range(1, 6):
            cb(t, {"objective": 1.0 / t})
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("job: training: round 1/5, ") and "objective 1.00000" in err[0]
    assert err[-1].startswith("job: done, 5/5 rounds")


def test_heartbeat_prints_status_lines(capsys, monkeypatch):
    from dpadmm import _progress
    from dpadmm.cli import _display as _common

    monkeypatch.setattr(_common, "_stderr_is_terminal", lambda: False)
    with _common.heartbeat("reproduce x", interval=0.05):
        with _progress.task(3, "cells") as t:
            t.update(advance=1)
            time.sleep(0.3)
    err = capsys.readouterr().err
    assert "reproduce x:" in err and "cells: 1/3" in err and "reproduce x: done" in err


def test_verdict_only_when_worse():
    from dpadmm.workflows.baselines import base_rate_log_loss, verdict

    assert verdict("loss", 0.3, 0.5, "trivial", "fix") is None
    line = verdict("loss", 7.2, 0.55, "predicting the base rate", "more budget")
    assert line.startswith("verdict: ") and "7.2" in line and "more budget" in line
    assert abs(base_rate_log_loss([1, 1, -1, -1], [1, -1]) - 0.6931) < 1e-3


@pytest.mark.slow
def test_piped_output_does_not_wrap_numbers(tmp_path):
    proc = _run(["vertical", "admm", "--data", "a9a", "--normalize-rows", "--iteration-epsilon", "10", "--iterations", "3",
                 "--seed", "0", "--quiet"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    priv = [ln for ln in proc.stdout.splitlines() if ln.startswith("privacy:")]
    assert len(priv) == 1 and len(priv[0]) > 80  # one long line, not wrapped at 80 columns
    assert "δ = 4e-05 per party" in priv[0] and "δ = (T + 1) × the per-iteration δ 1e-5, T = 3" in priv[0]  # δ explained
    assert "verdict:" in proc.stdout or "test log loss" in proc.stdout


@pytest.mark.slow
def test_reproduce_zhou_table1_quick_progress_on_a_pipe(tmp_path):
    proc = _run(["reproduce", "zhou-table1", "--quick", "--out", str(tmp_path / "t1")])
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("reproduce zhou-table1 --quick:")]
    assert lines, proc.stderr  # periodic plain lines while it ran (first after 5 s)


@pytest.mark.slow
def test_reproduce_hu_fig3_quick_each_warning_once(tmp_path):
    proc = _run(["reproduce", "hu-fig3", "--quick", "--out", str(tmp_path / "f3")])
    assert proc.returncode == 0, proc.stderr
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == len(set(warnings)), warnings
    assert all(len(w) < 400 for w in warnings)


_real_wait = __import__("threading").Event.wait


def _fast_wait(self, timeout=None):
    """Event.wait with every timeout shortened to 0.05 s (the heartbeat's 20 s first wait)."""
    return _real_wait(self, None if timeout is None else min(timeout, 0.05))


def test_ambient_heartbeat_quiet_while_a_progress_display_runs(capsys, monkeypatch):
    from dpadmm.cli import _display as _common

    monkeypatch.setattr(_common, "_stderr_is_terminal", lambda: False)
    monkeypatch.setattr(_common.threading.Event, "wait", _fast_wait)
    with _common.ambient_heartbeat("dpadmm job", interval=0.05):
        time.sleep(0.2)  # no display: ambient lines
        n_before = capsys.readouterr().err.count("dpadmm job:")
        with _common.progress(3, "bar", interval=100.0) as cb:
            cb(1, {})
            time.sleep(0.2)  # a display is active: ambient heartbeat stays quiet
        during = capsys.readouterr().err.count("dpadmm job:")
    assert n_before >= 1 and during <= 1
