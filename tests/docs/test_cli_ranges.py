"""Every numeric option of every command is range-checked at the boundary, before any work.

The options are found by walking the typer app (their annotations say int/float), so a new numeric
option without an entry in ``dpadmm.cli._ranges.RANGES`` fails here. Each is then given a value out
of its range: one ``error:`` line naming the option in CLI terms, exit code 2, nothing written —
and the command itself never starts (the app is replaced by a tripwire), so no data is loaded and no
fit runs first (``audit --end-to-end --samples -5`` used to run for minutes).
"""

from __future__ import annotations

import inspect
import re

import pytest

from conftest import run_cli

import dpadmm.cli as cli
from dpadmm.cli._ranges import RANGES, check_argv
from dpadmm.exceptions import InvalidParameterError

BASE = {  # the smallest command line each command accepts otherwise
    "vertical admm": ["vertical", "admm", "--data", "a9a"],
    "vertical experts": ["vertical", "experts", "--data", "a9a"],
    "vertical encrypted": ["vertical", "encrypted", "--data", "a9a"],
    "consensus gossip": ["consensus", "gossip", "--epsilon", "1"],
    "consensus madmm": ["consensus", "madmm"],
    "demo": ["demo"],
    "reproduce": ["reproduce", "hu-fig1", "--quick"],
    "functional": ["functional", "--simulate"],
    "audit": ["audit", "--end-to-end"],
    "provision": ["provision", "--parties", "a,b"],
    "score": ["score", "--party", "new.csv", "--model", "run", "--insecure"],
    "attack kkt": ["attack", "kkt"],
    "attack labels": ["attack", "labels", "--quick"],
    "party serve": ["party", "serve", "--protocol", "vertical-sharing", "--name", "party2", "--data",
                    "train=missing.csv", "--insecure"],
}


def _numeric_options():
    import typer.main

    found = []

    def walk(cmd, path):
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, path + [name])
            return
        sig = inspect.signature(cmd.callback)
        for p in cmd.params:
            ann = str(sig.parameters[p.name].annotation)
            if ("int" in ann or "float" in ann) and "bool" not in ann and p.opts[0].startswith("--"):
                found.append((" ".join(path), p.opts[0], p.default))

    walk(typer.main.get_command(cli.app), [])
    return found


NUMERIC = _numeric_options()
CHECKED = [(c, o) for c, table in RANGES.items() for o in table]


def test_every_numeric_option_has_a_range():
    assert len(NUMERIC) > 60  # the walk found the app's options
    missing = [(c, o) for c, o, _ in NUMERIC if o not in RANGES.get(c, {})]
    assert not missing, f"numeric options without a range in dpadmm.cli._ranges.RANGES: {missing}"
    assert set(BASE) == set(RANGES)


@pytest.mark.parametrize("command,option,default", NUMERIC, ids=[f"{c}:{o}" for c, o, _ in NUMERIC])
def test_defaults_are_in_range(command, option, default, monkeypatch):
    monkeypatch.setattr("dpadmm.cli._ranges._check_files", lambda *a: None)
    if default is not None:
        check_argv(BASE[command] + [option, str(default)])


class _Tripwire:
    """Stands in for the CLI's command tree (``dpadmm.cli.command()``): starting a command fails the test; the
    error path may still read its (empty) options."""

    commands: dict = {}
    params: list = []

    def __init__(self, what: str):
        self.what = what

    def main(self, *a, **k):
        raise AssertionError(self.what)


@pytest.mark.parametrize("command,option", CHECKED, ids=[f"{c}:{o}" for c, o in CHECKED])
def test_out_of_range_value_is_one_error_line_exit_2_before_any_work(command, option, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli, "command", lambda: _Tripwire(f"dpadmm {command} started before {option} -5 was refused"))
    out = tmp_path / "out"
    code, stdout, stderr = run_cli(BASE[command] + [option, "-5", "--out", out], capsys)
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, stderr)
    assert f"{option} must be" in lines[0] and f"got {option} -5" in lines[0], lines[0]
    assert not re.search(r"[a-z_]=", lines[0]), lines[0]  # CLI terms, not Python's name=value
    assert not out.exists() and stdout == ""


@pytest.mark.parametrize("argv,needle", [
    (["consensus", "madmm", "--eta", "0.5,abc"], "'abc' is not a number"),
    (["consensus", "madmm", "--alpha-growth", "1.05,0"], "--alpha-growth must be"),
    (["vertical", "admm", "--train", "t.svm", "--parties", "66,0"], "--parties must be"),
    (["functional", "--simulate", "--y-range=5,-5"], "--y-range must be two numbers lo,hi with lo < hi"),
    (["functional", "--simulate", "--y-range", "1"], "--y-range must be"),
    (["audit", "--end-to-end", "--runs", "10"], "(or 0 for the default)"),
    (["vertical", "admm", "--data", "a9a", "--delta", "1"], "in (0, 1)"),
    (["vertical", "admm", "--train", "t.svm", "--parties", "66,2.5"], "an integer >= 1"),
    (["demo", "--epsilon=nan"], "--epsilon must be"),
])
def test_lists_pairs_and_edges(argv, needle):
    with pytest.raises(InvalidParameterError, match=None) as info:
        check_argv(argv)
    assert needle in str(info.value), str(info.value)


@pytest.mark.parametrize("argv", [
    ["consensus", "madmm", "--eta", "0.55,0.65,0.6", "--alpha", "3"], ["audit", "--runs", "0"], ["audit", "--runs", "40"],
    ["functional", "--simulate", "--y-range=-10,10"], ["vertical", "admm", "--data", "a9a", "--noise-scale", "0"],
    ["vertical", "admm", "--help"], ["reproduce", "hu-fig1", "--reps", "0"],
])
def test_valid_values_pass(argv):
    check_argv(argv)


@pytest.mark.parametrize("argv,opt", [
    (["vertical", "admm", "--train", "missing.svm", "--parties", "3,3"], "--train"),
    (["vertical", "admm", "--party", "missing_a.csv", "--party", "missing_b.csv"], "--party"),
    (["functional", "--train", "missing.csv"], "--train"),
    (["consensus", "madmm", "--data", "missing.svm"], "--data"),
    (["party", "serve", "--protocol", "vertical-sharing", "--name", "party2", "--data", "train=missing.csv",
      "--insecure"], "--data"),
])
def test_missing_file_refused_before_any_work(argv, opt, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "command", lambda: _Tripwire("command started"))
    code, stdout, stderr = run_cli(argv, capsys)
    assert code == 2 and stderr.strip().startswith(f"error: {opt} ") and "file not found" in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1


def test_party_file_errors_name_the_separator_and_the_plain_id(tmp_path, capsys):
    (tmp_path / "semi.csv").write_text("id;y;a\n1;1;0.5\n2;-1;0.1\n")
    (tmp_path / "dup.csv").write_text("id,y,a\n1,1,0.5\n2,-1,0.1\n2,1,0.3\n")
    (tmp_path / "b.csv").write_text("id,b\n1,0.5\n2,0.1\n")
    code, _, err = run_cli(["vertical", "admm", "--party", tmp_path / "semi.csv", "--party", tmp_path / "b.csv", "--quiet"],
                           capsys)
    assert code == 2 and "looks ';'-separated" in err and "--id-column" not in err, err
    code, _, err = run_cli(["vertical", "admm", "--party", tmp_path / "dup.csv", "--party", tmp_path / "b.csv", "--quiet"],
                           capsys)
    assert code == 2 and "repeats id '2'" in err and "np." not in err, err


def test_library_messages_in_cli_terms_for_the_cli():
    """A library message names Python parameters; the CLI rewrites them to its options (only options of the
    command being run)."""
    from dpadmm.cli import command
    from dpadmm.cli._ranges import cli_terms

    app = command()
    msg = "too few curves to estimate the response's range (pass y_range=(lo, hi)); got tau=1.5."
    assert cli_terms(msg, ["functional"], app) == ("too few curves to estimate the response's range (pass --y-range lo,hi); "
                                              "got --tau 1.5.")
    assert cli_terms("random_state must be a non-negative int, got random_state=-1.", ["consensus", "madmm"], app) == \
        "--seed must be a non-negative int, got --seed -1."
    assert cli_terms("normalise the rows (normalize=True).", ["consensus", "madmm"], app) == "normalise the rows (--normalize)."
    assert cli_terms("tau must be in (0, 1)", ["vertical"], app) == "tau must be in (0, 1)"  # not a vertical option
