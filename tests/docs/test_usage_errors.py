"""Usage errors end in one ``error:`` line naming the problem and the fix, exit code 2, no traceback.

Run as a subprocess (the installed console entry point's code path, real stderr), plus the
in-process ``main`` for the cheap cases.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _run(args, **kw):
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="100")
    return subprocess.run([sys.executable, "-m", "dpadmm", *args], capture_output=True, text=True, env=env,
                          timeout=120, **kw)


USAGE_ERRORS = [
    # (argv, text the error line must contain)
    (["vertical", "admm", "--data", "a9a", "--iteration", "10"], "--iterations"),           # mistyped option
    (["vertical", "admm", "--epsilon", "abc"], "'abc'"),                                    # bad value (float)
    (["consensus", "madmm", "--nodes", "2.5"], "whole number"),                              # bad value (int)
    (["nosuch"], "vertical"),                                                       # unknown command
    (["attack", "nosuch"], "kkt"),                                                  # unknown subcommand
    (["reproduce", "nosuch", "--out", "never-written"], "hu-fig3"),                 # unknown reproduction
    (["reproduce"], "NAME"),                                                        # missing argument
    (["reproduce", "hu-fig1"], "--out"),                                            # missing required option
    (["vertical", "admm", "--lam"], "--lam"),                                               # option without its value
    (["functional", "--simulate", "--tau", "1.5"], "tau"),                          # out of range (library check)
]


# a process start each (~0.7 CPU-s): the default suite runs three as processes and every case in-process below;
# the slow suite runs every case as a process
_IN_DEFAULT = {"--iterations", "'abc'", "vertical"}


@pytest.mark.parametrize("argv,needle", [p if p[1] in _IN_DEFAULT else pytest.param(*p, marks=pytest.mark.slow)
                                         for p in USAGE_ERRORS], ids=[" ".join(a) for a, _ in USAGE_ERRORS])
def test_usage_error_one_line_exit_2(argv, needle, tmp_path):
    proc = _run(argv, cwd=tmp_path)
    _one_error_line(proc.returncode, proc.stdout, proc.stderr, needle)
    assert not (tmp_path / "never-written").exists()


@pytest.mark.parametrize("argv,needle", USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS])
def test_usage_error_one_line_exit_2_in_process(argv, needle, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(argv, capsys)
    _one_error_line(code, out, err, needle)
    assert not (tmp_path / "never-written").exists()


def _one_error_line(code, out, err, needle):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert "Traceback" not in err and "Traceback" not in out
    assert 1 <= len(lines) <= 3, err
    assert lines[0].startswith("error: "), err
    assert needle in err, err
    assert "--help" in err or "choose" in err or "must" in err, err  # names a fix


def test_version_exits_0():
    from dpadmm import __version__

    proc = _run(["--version"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"dpadmm {__version__}"


@pytest.mark.parametrize("argv", [[], ["attack"]])
def test_bare_command_prints_help(argv):
    proc = _run(argv)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "Usage" in proc.stdout and "--help" in proc.stdout


def test_help_lists_every_reproduction():
    from dpadmm.cli.reproduce import ALL_NAMES
    from dpadmm.experiments import load_all

    assert sorted(ALL_NAMES) == sorted(load_all())
    proc = _run(["reproduce", "--help"])
    assert proc.returncode == 0
    flat = " ".join(proc.stdout.replace("│", " ").split())
    for name in ALL_NAMES:
        assert name in flat, name


def test_in_process_main_same_contract(capsys):
    code, out, err = run_cli(["vertical", "admm", "--iterations", "x"], capsys)
    assert code == 2 and err.startswith("error: invalid value for --iterations: got 'x'") and len(err.splitlines()) == 1


def test_import_dpadmm_is_light():
    """`import dpadmm` and the CLI's module imports load none of the heavy libraries."""
    code = ("import sys, dpadmm, dpadmm.cli; heavy = ['sklearn', 'pandas', 'networkx', 'matplotlib', "
            "'dp_accounting', 'scipy.signal', 'statsmodels', 'scipy.sparse']; "
            "print([m for m in heavy if m in sys.modules])")
    env = dict(os.environ, PYTHONPATH=SRC)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_lazy_reexports():
    import dpadmm

    assert dpadmm.VerticalLogisticRegression.__name__ == "VerticalLogisticRegression"
    assert "ConsensusLogisticRegression" in dir(dpadmm)
    with pytest.raises(AttributeError):
        dpadmm.NoSuchThing  # noqa: B018


def test_warning_shown_once(capsys):
    import warnings

    from dpadmm.cli._common import show_warning_once

    show_warning_once.seen.clear()
    old = warnings.showwarning
    warnings.showwarning = show_warning_once
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            for _ in range(5):
                warnings.warn("same thing", UserWarning)
            warnings.warn("another thing", UserWarning)
    finally:
        warnings.showwarning = old
    err = capsys.readouterr().err
    assert err.count("warning: same thing") == 1 and err.count("warning: another thing") == 1


def _all_command_paths():
    import typer.main

    from dpadmm.cli import app

    out = []

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, path + [name])
        else:
            out.append(path)

    walk(typer.main.get_command(app), [])
    return out


def test_every_command_rejects_an_unknown_option_in_one_line(capsys):
    """Every registered command (including ones added later) turns a mistyped option into one line."""
    paths = _all_command_paths()
    assert ["vertical", "admm"] in paths and ["vertical", "experts"] in paths and ["attack", "kkt"] in paths
    for path in paths:
        code, out, err = run_cli([*path, "--no-such-option-xyz"], capsys)
        assert code == 2, (path, err)
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, (path, err)
        assert f"dpadmm {' '.join(path)} --help" in err, (path, err)
