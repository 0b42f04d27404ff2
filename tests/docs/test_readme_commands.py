"""Every ``dpadmm`` command in the shell blocks of README.md and the documentation pages (docs/**/*.md) runs (slow suite), in its ``--quick`` form where the
command has one.

The commands are read from the README itself (continuation lines joined, ``a && dpadmm …`` chains
split), so a command added to the README is run without a code edit. ``--out`` and other output paths
go to a temporary directory; ``--quiet`` is added where the command has it. Commands that need files
only a user has (``train.svm``, ``/data/…``), other machines (Ray cluster addresses, gRPC peers, ``party
serve``) or an earlier run (``...``) are listed with the reason and not run; ``test_commands_are_listed``
fails if the README's commands are not all accounted for. A comment line ``# → TEXT`` right below a
command quotes its output: every decimal number in TEXT must appear in what the command printed (at the
quoted precision), so README figures written that way are checked against the tool as it is. A command that
repeats its whole fit (``--runs N``, N > 2) and quotes no output runs twice here: the command and its options are
what this test checks (the papers' figures are checked by test_readme_numbers), and the repetitions are the same
work again (about 150 CPU-seconds of the slow suite).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from conftest import run_cli_once

from doc_pages import PAGES, ROOT, where

OUTPUT_OPTIONS = ("--out", "--transcript")
_QUICK = {"reproduce", "audit", "attack labels"}  # commands with a --quick option
MAX_RUNS = 2  # repetitions of a whole fit a command without a quoted output runs here (see the docstring)
_NO_QUIET = {"attack kkt", "attack labels", "provision", "party serve", "party request"}


def _commands() -> list[tuple[str, list[str], str]]:
    """('page:line', argv after 'dpadmm', the '# →' quote or '') for every shell command of the documentation."""
    out = []
    for page in PAGES:
        out += _page_commands(page.read_text(), where(page))
    return out


def _page_commands(text: str, name: str) -> list[tuple[str, list[str], str]]:
    out = []
    for block in re.finditer(r"```bash\n(.*?)```", text, re.S):
        start = text.count("\n", 0, block.start(1)) + 1
        lines = block.group(1).split("\n")
        i = 0
        while i < len(lines):
            line, first = lines[i], i
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i].strip()
            quote = ""
            if i + 1 < len(lines) and lines[i + 1].strip().startswith("# →"):
                quote = lines[i + 1].strip()[3:].strip()
            for part in line.split("#", 1)[0].split("&&"):
                part = part.strip()
                if part.startswith("dpadmm "):
                    try:
                        argv = shlex.split(part)[1:]
                    except ValueError:  # e.g. "<A's address>": a template, split plainly
                        argv = part.split()[1:]
                    out.append((f"{name}:{start + first}", argv, quote))
            i += 1
    return out


COMMANDS = _commands()


def _name(argv: list[str]) -> str:
    words = [a for a in argv[:2] if not a.startswith("-")]
    return " ".join(words[:2]) if words and words[0] in ("attack", "party") else (words[0] if words else "")


def _why_not_run(argv: list[str]) -> str | None:
    text = " ".join(argv)
    if "..." in argv or "<" in text:
        return "a template (placeholders or an earlier run)"
    if _name(argv) == "party serve" or "--peer" in argv or "--ray-address" in argv:
        return "needs other machines (covered by examples/cross_org_loopback.sh and the Ray two-node test)"
    if "--csr" in argv:
        return "signs the request an earlier command wrote (party request); the CSR flow is tested in test_grpc_ops.py"
    if _name(argv) == "provision":
        return None
    for i, a in enumerate(argv):
        if i and argv[i - 1] in OUTPUT_OPTIONS:
            continue
        value = a.split("=", 1)[-1]
        if re.search(r"\.(svm|csv|txt)$", value) and not (ROOT / value).exists():
            return f"needs the user's own file {value}"
    return None


def test_commands_are_listed():
    """The collector sees the README's commands and every one is either run or skipped for a stated reason."""
    assert len(COMMANDS) >= 30, COMMANDS
    names = {_name(a) for _, a, _ in COMMANDS}
    assert {"vertical", "consensus", "functional", "reproduce", "audit", "attack kkt", "attack labels", "demo"} <= names
    runnable = [c for c in COMMANDS if _why_not_run(c[1]) is None]
    assert len(runnable) >= 20


def _prepare(argv: list[str], tmp_path: Path, quote: str = "") -> list[str]:
    args = list(argv)
    for i, a in enumerate(args):
        if i and args[i - 1] in OUTPUT_OPTIONS:
            args[i] = str(tmp_path / Path(a).name)
    name = _name(args)
    if name in _QUICK and "--quick" not in args:
        args.append("--quick")
    if name not in _NO_QUIET and "--quiet" not in args:
        args.append("--quiet")
    if name == "provision":
        args += [] if "--out" in args else ["--out", str(tmp_path / "pki")]
    if "--runs" in args[:-1] and not quote:
        i = args.index("--runs")
        args[i + 1] = str(min(int(args[i + 1]), MAX_RUNS))
    return args


def _printed(number: str, out: str) -> bool:
    decimals = len(number.split(".")[1])
    return any(abs(float(p) - float(number)) <= 0.5 * 10.0 ** -decimals + 1e-12
               for p in re.findall(r"-?\d+\.\d+(?:e[-+]?\d+)?", out))


def _param(line, argv, quote):
    # the end-to-end audit (about 300 CPU-seconds) is shared with test_audit_e2e's run of it (conftest.run_cli_once):
    # under CI's two xdist workers both go to the same one (its group of long tests)
    heavy = _name(argv) == "audit" and "--end-to-end" in argv
    return pytest.param(line, argv, quote, id=f"{line}:{_name(argv)}",
                        marks=[pytest.mark.xdist_group("heavy-b")] if heavy else [])


@pytest.mark.slow
@pytest.mark.parametrize("line,argv,quote", [_param(*c) for c in COMMANDS])
def test_readme_command_runs(line, argv, quote, tmp_path, capsys, monkeypatch):
    why = _why_not_run(argv)
    if why:
        pytest.skip(why)
    monkeypatch.chdir(tmp_path)
    args = _prepare(argv, tmp_path, quote)
    code, out, err, _ = run_cli_once(args, capsys)  # a command the README gives twice runs once
    assert code == 0, f"{line}: dpadmm {' '.join(args)} exited {code}: {err[-2000:]}"
    missing = [n for n in re.findall(r"(?<![\w.])\d+\.\d+", quote) if not _printed(n, out)]
    assert not missing, f"{line} quotes {missing}; the command printed:\n{out}"


def test_quote_check_can_fail():
    assert _printed("0.3412", "test log loss: 0.34117") and not _printed("0.3412", "test log loss: 0.3419")
    assert _why_not_run(["vertical", "admm", "--train", "train.svm"]) == "needs the user's own file train.svm"
    assert _why_not_run(["vertical", "admm", "--data", "a9a", "--out", "x.csv"]) is None
    tmp = Path("/tmp")
    assert _prepare(["consensus", "madmm", "--runs", "10"], tmp)[:4] == ["consensus", "madmm", "--runs", "2"]
    assert _prepare(["consensus", "madmm", "--runs", "10"], tmp, quote="mean 0.47")[:4] == ["consensus", "madmm", "--runs",
                                                                                          "10"]
