"""A mistyped option gets a suggestion from the command's own options only (issue 40, item 5).

At c765ad4 ``dpadmm vertical --eps 1`` suggested ``--psi`` (a close string among every command's options) and
``dpadmm functional --resume x`` suggested ``--ray-resources`` (functional has no ``--resume``). The other three
wrong hints of that issue have their own tests: the refusal hint by cause (tests/unit/test_refusal_hint.py), labels
mixing -1/0/1 and a wrong column name reported from the header (tests/protocols/test_early_column_checks.py).
"""

from __future__ import annotations

import pytest

from conftest import run_cli


@pytest.mark.parametrize("argv, meant", [
    (["vertical", "admm", "--eps", "1"], "--epsilon"),
    (["vertical", "experts", "--eps", "1"], "--epsilon"),
    (["consensus", "gossip", "--eps", "1"], "--epsilon"),
    (["functional", "--eps", "1"], "--epsilon"),
    (["vertical", "admm", "--label-eps", "1"], "--label-epsilon"),
])
def test_a_near_miss_suggests_the_commands_own_option(argv, meant, capsys):
    code, out, err = run_cli(argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and not out, err
    assert f"did you mean {meant}?" in lines[0], lines[0]
    assert "--psi" not in lines[0], lines[0]


def test_an_option_the_command_lacks_suggests_nothing_unrelated(capsys):
    code, _, err = run_cli(["functional", "--resume", "x"], capsys)
    line = err.strip()
    assert code == 2 and line.startswith("error: dpadmm functional has no option --resume"), line
    assert "did you mean" not in line and "--ray-resources" not in line, line
