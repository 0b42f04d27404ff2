"""Every fenced ```python block of README.md and docs/**/*.md runs, as a user would paste it.

The blocks are found in the Markdown itself, so a block added to the docs is tested without a code
edit. An HTML comment on the line before a block says how: ``<!-- example: slow -->`` (runs in the
slow suite: over ~2 s) or ``<!-- example: fragment (why) -->`` (a quoted snippet with names from
its context: compiled, not run). Every other block runs in the default suite. Numbers a ``print``
line's comment quotes (``# records: ε = 1.699``; ``0.34...`` means "starts with") must appear in what
the block printed.
"""

from __future__ import annotations

import re

import pytest

from doc_pages import PAGES as FILES, ROOT
_BLOCK = re.compile(r"(?:<!-- example: (?P<kind>\w+)[^>]*-->\n)?```python[^\n]*\n(?P<code>.*?)^```", re.S | re.M)


def _blocks():
    out = []
    for path in FILES:
        text = path.read_text()
        for m in _BLOCK.finditer(text):
            line = text.count("\n", 0, m.start("code"))
            out.append((f"{path.relative_to(ROOT)}:{line}", m.group("kind") or "run", m.group("code")))
    return out


BLOCKS = _blocks()


def test_blocks_are_listed():
    """The collector finds the blocks (a broken regex would otherwise test nothing) and every block's
    kind is one this test knows."""
    kinds = {k for _, k, _ in BLOCKS}
    assert kinds <= {"run", "slow", "fragment"}, kinds
    readme = [b for b in BLOCKS if b[0].startswith("README.md")]
    assert len(readme) == (ROOT / "README.md").read_text().count("```python"), "a README block was not collected"
    assert any(k != "fragment" for _, k, _ in BLOCKS)
    # the pages the README's content moved to are collected (docs/ subfolders included)
    assert any(b[0].startswith("docs/howto/consensus.md") for b in BLOCKS)
    assert any(b[0].startswith("docs/tutorials/vertical.md") for b in BLOCKS)


@pytest.mark.parametrize("where,kind,code", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_block_compiles(where, kind, code):
    compile(code, where, "exec")


def _quoted_numbers(code: str) -> list[str]:
    """Decimal numbers quoted in the comments of ``print(...)`` lines ("0.34..." keeps its dots)."""
    nums = []
    for line in code.splitlines():
        if line.lstrip().startswith("print(") and "#" in line:
            nums += re.findall(r"(?<![\w.])\d+\.\d+(?:\.\.\.)?", line.split("#", 1)[1])
    return nums


def _printed(number: str, out: str) -> bool:
    printed = re.findall(r"\d+\.\d+(?:e[-+]?\d+)?", out)
    if number.endswith("..."):
        return any(p.startswith(number[:-3]) for p in printed)
    decimals = len(number.split(".")[1])
    return any(abs(float(p) - float(number)) <= 0.5 * 10.0 ** -decimals + 1e-12 for p in printed)


def _side_claims(code: str) -> list[tuple[str, str]]:
    """(side, ε) pairs a ``print`` line's comment quotes as ``side: ε = X`` (``records: ε = 2.199``)."""
    claims = []
    for line in code.splitlines():
        if line.lstrip().startswith("print(") and "#" in line:
            claims += re.findall(r"(\w+): ε = (\d+(?:\.\d+)?)", line.split("#", 1)[1])
    return claims


def _side_claim_holds(side: str, eps: str, out: str) -> bool:
    """The output says ``side: ε = …`` with that ε at the quoted precision — not merely the number somewhere else
    (a report that prints the paper's bound 1.699 beside a total of 2.199 does not make "records: ε = 1.699" true)."""
    printed = re.findall(rf"\b{side}: ε = (\d+(?:\.\d+)?)", out)
    decimals = len(eps.split(".")[1]) if "." in eps else 0
    return any(abs(float(p) - float(eps)) <= 0.5 * 10.0 ** -decimals + 1e-12 for p in printed)


def _run(where, code, tmp_path, monkeypatch, capsys):
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, where, "exec"), {"__name__": "__main__"})  # noqa: S102 - the docs' own examples
    out = capsys.readouterr().out
    missing = [n for n in _quoted_numbers(code) if not _printed(n, out)]
    assert not missing, f"{where}: the comments quote {missing}, the block printed:\n{out}"
    wrong = [f"{s}: ε = {e}" for s, e in _side_claims(code) if not _side_claim_holds(s, e, out)]
    assert not wrong, f"{where}: the comments say {wrong}, the block printed:\n{out}"


RUN = [b for b in BLOCKS if b[1] == "run"]
SLOW = [b for b in BLOCKS if b[1] == "slow"]


@pytest.mark.parametrize("where,kind,code", RUN, ids=[b[0] for b in RUN])
def test_block_runs(where, kind, code, tmp_path, monkeypatch, capsys):
    _run(where, code, tmp_path, monkeypatch, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("where,kind,code", SLOW, ids=[b[0] for b in SLOW])
def test_slow_block_runs(where, kind, code, tmp_path, monkeypatch, capsys):
    _run(where, code, tmp_path, monkeypatch, capsys)


def test_quoted_number_check_can_fail():
    assert _printed("1.699", "records: ε = 1.6989 at δ = 0")
    assert not _printed("1.699", "records: ε = 1.71 at δ = 0")
    assert _printed("0.34...", "{'log_loss': 0.3411632}") and not _printed("0.35...", "{'log_loss': 0.3411632}")
    assert _quoted_numbers("print(x)  # ε = 1.699, loss 0.34...\nx = 2.5  # 3.1") == ["1.699", "0.34..."]
    # the consensus example's old comment: the total is 2.199 (P(T) = 1.699 plus the fallback's 0.5)
    out = "records: ε = 2.199 at δ = 0 (...)\nnoise: seeded; paper's bound P(T) = ...: ε=1.699\n1.6988838290497323"
    assert _side_claims("print(m.privacy_.summary())  # records: ε = 1.699 at δ = 0") == [("records", "1.699")]
    assert not _side_claim_holds("records", "1.699", out) and _side_claim_holds("records", "2.199", out)
    assert _side_claim_holds("features", "50", "features: ε = 50 at δ = 1e-05 per party")
