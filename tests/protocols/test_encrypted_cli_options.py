"""Run options ``vertical encrypted`` does not honour are refused with one line and exit 2 (issue 35, item 6:
``--transcript FILE`` used to exit 0 and write no transcript), before any data is read or anything written: the command
has no such option (issue 39: one command per protocol), and the line names the command that has it."""

from __future__ import annotations

import numpy as np
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


@pytest.mark.slow  # key generation and HE rounds: several seconds
def test_cli_encrypted_prints_auc_baselines_and_verdict_and_keeps_native_logs_off_stdout(tmp_path, capfd):
    """Issue 38: the encrypted command prints the AUC and the baselines like the others, a verdict when its final
    model is worse than the label party alone beyond the test set's noise (metrics.json's ``verdict``, ``None``
    otherwise), and under --quiet nothing but its results reaches stdout (the HE library's C++ log lines included)."""
    import json

    from conftest import run_cli
    from sklearn.datasets import dump_svmlight_file

    pytest.importorskip("heu")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 6))
    y = np.where(X @ rng.normal(size=6) + 0.3 * rng.normal(size=300) > 0, 1, -1)
    dump_svmlight_file(X[:200], y[:200], str(tmp_path / "train.svm"))
    dump_svmlight_file(X[200:], y[200:], str(tmp_path / "test.svm"))
    code, out, err = run_cli(["vertical", "encrypted", "--train", tmp_path / "train.svm", "--test",
                              tmp_path / "test.svm", "--parties", "3,3", "--normalize-rows", "--epsilon", "1",
                              "--iterations", "2", "--seed", "0", "--quiet", "--out", tmp_path / "run"], capfd)
    assert code == 0, err
    native = capfd.readouterr().out  # anything written to descriptor 1 after run_cli's capture
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert "AUC: " in out and "baselines (test log loss): base rate" in out and "label party alone" in out
    assert 0.0 <= m["final"]["test_auc"] <= 1.0
    alone = m["baselines"]["label_party_alone"]["test_log_loss"]
    if m["final"]["combination"]["choice"] != "own model":
        worse = m["final"]["test_log_loss"] > alone + m["final"]["verdict_tolerance"]
        assert (m["verdict"] is not None) == worse and (("WORSE THAN THE LABEL PARTY ALONE" in out) == worse)
    for line in (out + native).splitlines():  # results only: no C++ log line ("[I]", "[info]", a timestamp)
        assert not line.lstrip().startswith("[") and "heu" not in line.lower(), line
