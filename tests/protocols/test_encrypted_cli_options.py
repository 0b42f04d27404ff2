"""Run options ``vertical encrypted`` does not honour are refused with one line and exit 2 (issue 35, item 6:
``--transcript FILE`` used to exit 0 and write no transcript), before any data is read or anything written: the command
has no such option (issue 39: one command per protocol), and the line names the command that has it."""

from __future__ import annotations

import pytest
from conftest import run_cli


@pytest.mark.parametrize("option,value", [("--transcript", "t.jsonl"), ("--checkpoint-every", "2"),
                                          ("--resume", "ck")])
def test_unhonoured_run_options_are_refused(tmp_path, capsys, option, value):
    arg = str(tmp_path / value) if option != "--checkpoint-every" else value
    code, out, err = run_cli(["vertical", "encrypted", "--data", "a9a", "--epsilon", "1",
                              "--label-epsilon", "1", "--out", tmp_path / "run", option, arg], capsys)
    text = out + err
    assert code == 2
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), text
    assert f"has no option {option}; {option} belongs to `dpadmm vertical admm`" in text, text
    assert not (tmp_path / "run").exists() and not (tmp_path / "t.jsonl").exists()
