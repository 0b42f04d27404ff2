"""The CLI helps: ``party serve --help`` names every protocol of the registry; piped progress lines name a phase."""

from __future__ import annotations

import time

import numpy as np
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
    from dpadmm.cli import _common

    B, y, Bt, yt = a9a_small
    dump_svmlight_file(np.hstack(B), y, str(tmp_path / "train.svm"), zero_based=False)
    monkeypatch.setattr(_common, "_stderr_is_terminal", lambda: False)
    monkeypatch.setattr(_common, "PLAIN_PROGRESS_INTERVAL", 0.0)  # a line every round (the short run takes < 10 s)
    code, out, err = run_cli(["vertical", "--train", tmp_path / "train.svm", "--parties", "66,57",
                              "--iterations", "4", "--out", tmp_path / "run"], capsys)
    assert code == 0, err
    lines = [ln for ln in err.splitlines() if ln.startswith("vertical ADMM: ")]
    assert lines and lines[0].startswith("vertical ADMM: training: round 1/4, ") and " s elapsed" in lines[0], err
    assert "s left" in lines[0]


def test_piped_heartbeat_names_the_phase(capsys, monkeypatch):
    from dpadmm.cli import _common

    monkeypatch.setattr(_common, "_stderr_is_terminal", lambda: False)
    with _common.heartbeat("dpadmm vertical", interval=0.05):
        _common.phase("PSI alignment")
        time.sleep(0.3)
    err = capsys.readouterr().err
    assert "dpadmm vertical: PSI alignment, 0 s elapsed" in err, err
