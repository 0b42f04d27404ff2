"""The old spellings ``dpadmm vertical [--protocol P] …`` and ``dpadmm consensus …`` keep working (issue 39, item 5):
they run ``dpadmm vertical P …`` / ``dpadmm consensus gossip|madmm …`` and print one deprecation line on stderr
naming the new spelling; the new spelling prints none."""

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
    (["consensus", "--epsilon", "1", "--nodes", "3"], ["consensus", "gossip", "--epsilon", "1", "--nodes", "3"],
     "warning: `dpadmm consensus --epsilon` is deprecated; use `dpadmm consensus gossip`."),
    (["consensus", "--perturbation", "none", "--epsilon=1"], ["consensus", "gossip", "--epsilon=1"],
     "warning: `dpadmm consensus --epsilon --perturbation none` is deprecated; use `dpadmm consensus gossip`."),
    (["consensus", "--nodes", "3"], ["consensus", "madmm", "--nodes", "3"],
     "warning: `dpadmm consensus` is deprecated; use `dpadmm consensus madmm`."),
    (["consensus", "--epsilon", "2", "--perturbation", "pp"], ["consensus", "madmm", "--epsilon", "2", "--perturbation",
                                                               "pp"],
     "warning: `dpadmm consensus --perturbation pp` is deprecated; use `dpadmm consensus madmm`."),
])
def test_old_spelling_is_rewritten(old, new, line):
    assert rewrite(old) == (new, line)


@pytest.mark.parametrize("argv", [["vertical"], ["vertical", "--help"], ["vertical", "admm", "--data", "a9a"],
                                  ["consensus", "gossip", "--epsilon", "1"], ["consensus", "madmm"], ["consensus"],
                                  ["consensus", "--help"], ["party", "serve", "--protocol", "x"]])
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


def test_old_consensus_spelling_runs_with_one_deprecation_line(tmp_path, capsys):
    """``dpadmm consensus --perturbation none`` (non-private M-ADMM), old and new spelling: the same lines; only the
    old one warns."""
    args = ["--nodes", "3", "--topology", "line", "--iterations", "3", "--seed", "0", "--quiet"]
    code, out_old, err_old = run_cli(["consensus", *args, "--out", tmp_path / "old"], capsys)
    assert code == 0, err_old
    assert [ln for ln in err_old.splitlines() if "deprecated" in ln] == [
        "warning: `dpadmm consensus` is deprecated; use `dpadmm consensus madmm`."]
    code, out_new, err_new = run_cli(["consensus", "madmm", *args, "--out", tmp_path / "new"], capsys)
    assert code == 0 and "deprecated" not in err_new, err_new
    assert [ln for ln in out_old.splitlines() if ln.startswith(("nodes", "privacy"))] == \
        [ln for ln in out_new.splitlines() if ln.startswith(("nodes", "privacy"))] != []


@pytest.mark.parametrize("argv, owner", [
    (["consensus", "gossip", "--epsilon", "1", "--alpha", "3"], "`dpadmm consensus madmm`"),
    (["consensus", "gossip", "--epsilon", "1", "--normalize"], "`dpadmm consensus madmm`"),
    (["consensus", "madmm", "--bounds", "b.csv"], "`dpadmm consensus gossip`"),
    (["consensus", "madmm", "--resume", "x"], "`dpadmm consensus gossip`"),
])
def test_no_command_takes_the_other_protocols_options(argv, owner, capsys):
    """The parser refuses the other protocol's option (no hand-written refusal) and names the command that has it."""
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and err.startswith(f"error: dpadmm {argv[0]} {argv[1]} has no option {argv[4 if argv[1] == 'gossip' else 2]}")
    assert owner in err, err
