"""The two-organisation tutorial works as written.

docs/tutorials/two-organisations.md is a page of ``bash`` blocks a person types; examples/two_organisations.sh is
generated from those blocks (``python tests/docs/test_two_organisations.py --write``), the only changes being
the three lines that choose the working directory and the two ports (the script takes the directory as its
argument and the ports from the environment, so that a test can pick free ones). The slow test runs the script:
the page's blocks one after another, in the page's two directories (partly overlapping customer lists,
certificates by the CSR flow, PSI, experts with both organisations' data protected, scoring, a refused
over-budget run, kill and resume), then checks what each step wrote.

Lines that depend on the ledger options of ``party serve`` (``--max-epsilon``, ``--delta``, ``--ledger``, ``--ledger-key``)
and on ``party ledger``: steps 2 to 6 of the page.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import pandas as pd
import pytest

from doc_pages import ROOT

SCRIPT = ROOT / "examples" / "two_organisations.sh"
PAGE = ROOT / "docs" / "tutorials" / "two-organisations.md"
# the page's own lines the script replaces: (pattern of the page's line, the script's line)
SETTINGS = [
    (r"^WORK=\S+", 'WORK=$(mkdir -p "${1:?usage: examples/two_organisations.sh DIR}" && cd "$1" && pwd)'),
    (r"^BANK_PORT=\d+", "BANK_PORT=${BANK_PORT:-7101}"),
    (r"^RETAILER_PORT=\d+", "RETAILER_PORT=${RETAILER_PORT:-7102}"),
]
HEADER = """#!/usr/bin/env bash
# GENERATED from docs/tutorials/two-organisations.md: edit the page, then run
#   python tests/docs/test_two_organisations.py --write
# The page's bash blocks one after another, on one machine:
#   examples/two_organisations.sh DIR      (an empty directory: the retailer's ledger remembers earlier runs)
# BANK_PORT and RETAILER_PORT (default 7101 and 7102) choose the two party servers' ports.
set -euo pipefail
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT    # the party servers still running if a step fails
"""
# what a block may run: dpadmm and ordinary shell (no function, no script of the repository)
COMMANDS = {"dpadmm", "cd", "cp", "ls", "mkdir", "python3", "kill", "wait", "until", "grep", "cat", "sleep", "done", "true", "tee", "[",
            "RETAILER_SERVER=$!", "BANK_SERVER=$!", "RUN=$!"}


def blocks(text: str) -> list[tuple[int, str]]:
    """(line number, body) of every ```bash block of the page."""
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in re.finditer(r"```bash\n(.*?)```", text, re.S)]


def generate(text: str) -> str:
    out = [HEADER]
    for line, body in blocks(text):
        for pattern, replacement in SETTINGS:
            body = re.sub(pattern + r"(?=\s)", lambda _m, r=replacement: r, body, flags=re.M)
        out.append(f"\n# docs/tutorials/two-organisations.md, line {line}\n{body}")
    return "".join(out)


def _command_lines(body: str) -> list[str]:
    lines, heredoc = [], None
    joined = re.sub(r"\\\n\s*", " ", body)
    for line in joined.splitlines():
        if heredoc:
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        m = re.search(r"<<'(\w+)'", line)
        heredoc = m.group(1) if m else None
        if line.strip() and not line.lstrip().startswith("#"):
            lines.append(line.split(" # ")[0].strip())
    return lines


def test_the_script_is_generated_from_the_page():
    text = PAGE.read_text()
    for pattern, _ in SETTINGS:
        assert len(re.findall(pattern + r"(?=\s)", text, re.M)) == 1, pattern
    assert SCRIPT.read_text() == generate(text), "run: python tests/docs/test_two_organisations.py --write"


def test_every_command_is_typeable():
    """No block calls a function defined elsewhere, and every variable a block uses is defined on the page."""
    text = PAGE.read_text()
    assert "{literalinclude}" not in text and "```{" not in text  # plain Markdown: it reads on GitHub too
    bodies = [b for _, b in blocks(text)]
    assert len(bodies) >= 8
    defined = {"HOME"} | set(re.findall(r"^\s*(\w+)=", "\n".join(bodies), re.M))
    for body in bodies:
        for line in _command_lines(body):
            for part in re.split(r"\|\||&&|;|\|", line):
                words = part.split()
                if words and words[0] not in ("do", "then") and not re.match(r"^\w+=", words[0]):
                    assert words[0] in COMMANDS, line
        used = set(re.findall(r"\$\{?(\w+)", re.sub(r"<<'EOF'.*?^EOF$", "", body, flags=re.S | re.M)))
        assert used <= defined | {"1"}, used - defined
    # distinct ports for the two parties on one machine, each server's --listen spelled out
    serves = [c for b in bodies for c in _command_lines(b) if c.startswith("dpadmm party serve")]
    assert len(serves) >= 5 and all("--listen 127.0.0.1:$" in c and '--ledger "sqlite:///$' in c and "--ledger-key" in c
                                   for c in serves), serves
    assert "BANK_PORT=7101" in text and "RETAILER_PORT=7102" in text


def test_the_flagship_run_protects_both_sides():
    text = PAGE.read_text()
    first = next(c for b in [b for _, b in blocks(text)] for c in _command_lines(b) if c.startswith("dpadmm vertical"))
    assert "dpadmm vertical experts" in first and "--psi" in first and "--epsilon 1" in first
    assert "--label-epsilon 4" in first
    assert "$RETAILER/ledger-store/ledger.db" in text and "ledger in `--out" not in text  # where it lives, said right


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.xdist_group("heavy-a")  # CI runs the slow suite on two workers: the longest tests first, split in two
def test_the_walkthrough_runs(tmp_path):
    """The page's blocks as written (about 4 minutes of wall time on a loaded 2-core machine: three PSI runs, two fits,
    scoring, a killed and resumed run), then what each step wrote."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, run in (("dpadmm", f'"{sys.executable}" -m dpadmm'), ("python3", f'"{sys.executable}"')):
        (bindir / name).write_text(f'#!/bin/sh\nexec {run} "$@"\n')  # this interpreter, as the page's commands
        (bindir / name).chmod(0o755)
    env = dict(os.environ, BANK_PORT=str(_free_port()), RETAILER_PORT=str(_free_port()), MPLBACKEND="Agg",
               GRPC_VERBOSITY="NONE", PATH=os.pathsep.join([str(bindir), os.environ.get("PATH", "")]),
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    work = tmp_path / "work"
    done = subprocess.run(["bash", str(SCRIPT), str(work)], capture_output=True, text=True, env=env, timeout=2400)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    bank, retailer = work / "bank", work / "retailer"
    experts = json.loads((bank / "run-experts" / "metrics.json").read_text())
    assert experts["config"]["psi"]["train"]["rows"] == 4500
    sides = experts["privacy"]["sides"]
    assert sides["labels"]["protected"] and sides["labels"]["epsilon"] == pytest.approx(4.0)
    assert sides["features"]["per_party"]["party2"] == pytest.approx(1.0, abs=1e-3)
    alone = experts["baselines"]["label_party_alone"]["test_log_loss"]
    assert experts["final"]["test_log_loss"] <= alone + 1e-9

    both = set(pd.read_csv(bank / "new.csv").id) & set(pd.read_csv(retailer / "new.csv").id)
    assert len(pd.read_csv(bank / "scores" / "predictions.csv")) == len(both) == 1200
    refused = [line for line in (bank / "refused.txt").read_text().splitlines() if line.startswith("error:")]
    shown = [line for line in PAGE.read_text().splitlines() if line.startswith("error: party 'party2' refused")]
    where = re.compile(r"ledger of data set [^)]*?…?\)")  # the data set's name and digest differ per machine
    assert len(refused) == 1 and [where.sub("ledger of …)", x) for x in refused] == [where.sub("ledger of …)", x) for x in shown]
    assert "party 'party2' failed" in (bank / "killed.txt").read_text()
    sharing = json.loads((bank / "run-sharing" / "metrics.json").read_text())
    assert sharing["final"]["iterations"] == 400
    assert min(sharing["privacy"]["per_party"].values()) >= 2 - 1e-3
    listing = subprocess.run([sys.executable, "-m", "dpadmm", "party", "ledger", "--ledger",
                              f"sqlite:///{retailer / 'ledger-store' / 'ledger.db'}", "--ledger-key",
                              str(retailer / "keys" / "ledger.key"), "--data", str(retailer / "train.csv"), "--json"],
                             capture_output=True, text=True, check=True, env=env)
    spent = json.loads(listing.stdout)[0]["epsilon_spent"]
    assert 2 < spent <= 8  # 1 (experts) and at least 2 (sharing), composed (PLD: less than their sum)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        SCRIPT.write_text(generate(PAGE.read_text()))
        print(f"wrote {SCRIPT.relative_to(ROOT)}")
    else:
        sys.exit("usage: python tests/docs/test_two_organisations.py --write")
