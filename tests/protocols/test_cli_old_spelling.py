"""The old spelling ``dpadmm vertical [--protocol P] …`` keeps working (issue 39, item 5): it runs ``dpadmm vertical
P …`` and prints one deprecation line on stderr naming the new spelling; the new spelling prints none."""

from __future__ import annotations

import pytest
from conftest import run_cli

from dpadmm.cli._legacy import rewrite


@pytest.mark.parametrize("old, new, line", [
    (["vertical", "--data", "a9a"], ["vertical", "admm", "--data", "a9a"],
     "warning: `dpadmm vertical` is deprecated; use `dpadmm vertical admm`."),
    (["vertical", "--protocol", "experts", "--data", "a9a"], ["vertical", "experts", "--data", "a9a"],
     "warning: `dpadmm vertical --protocol experts` is deprecated; use `dpadmm vertical experts`."),
    (["vertical", "--data", "a9a", "--protocol=encrypted"], ["vertical", "encrypted", "--data", "a9a"],
     "warning: `dpadmm vertical --protocol encrypted` is deprecated; use `dpadmm vertical encrypted`."),
])
def test_old_spelling_is_rewritten(old, new, line):
    assert rewrite(old) == (new, line)


@pytest.mark.parametrize("argv", [["vertical"], ["vertical", "--help"], ["vertical", "admm", "--data", "a9a"],
                                  ["consensus", "--epsilon", "1"], ["party", "serve", "--protocol", "x"]])
def test_new_spellings_and_other_commands_are_left_alone(argv):
    assert rewrite(argv) == (argv, None)


def test_old_spelling_runs_with_one_deprecation_line(tmp_path, capsys):
    """The same run, old and new spelling: the same metrics; only the old one warns."""
    args = ["--data", "a9a", "--normalize-rows", "--iterations", "2", "--seed", "0", "--quiet"]
    code, out_old, err_old = run_cli(["vertical", *args, "--out", tmp_path / "old"], capsys)
    assert code == 0, err_old
    deprecations = [ln for ln in err_old.splitlines() if "deprecated" in ln]
    assert deprecations == ["warning: `dpadmm vertical` is deprecated; use `dpadmm vertical admm`."]
    code, out_new, err_new = run_cli(["vertical", "admm", *args, "--out", tmp_path / "new"], capsys)
    assert code == 0, err_new
    assert "deprecated" not in err_new
    old_lines = [ln for ln in out_old.splitlines() if ln.startswith(("iterations:", "privacy:"))]
    assert old_lines and old_lines == [ln for ln in out_new.splitlines() if ln.startswith(("iterations:", "privacy:"))]


def test_old_spelling_keeps_its_refusal_of_an_unknown_protocol(capsys):
    code, out, err = run_cli(["vertical", "--data", "a9a", "--protocol", "nope"], capsys)
    assert code == 2 and err.startswith("error: --protocol must be one of admm, experts, encrypted"), err
