"""The CLI calls production code only (issue 39, item 5): no ``dpadmm.cli`` module imports ``dpadmm.experiments`` but
the two commands that run what lives there — ``cli/reproduce.py`` (the paper reproductions) and ``cli/audit.py`` (the
audit games) — and ``dpadmm.experiments`` never imports ``dpadmm.cli``.

Every import counts, at the top of a module or inside a function (the CLI imports its heavy modules lazily), relative
or absolute. Read from the source with :mod:`ast` (nothing is imported).
"""

from __future__ import annotations

import ast
import pathlib

PKG = pathlib.Path(__file__).resolve().parents[2] / "src" / "dpadmm"
#: the commands that run the reproductions and the audit games, which live in ``dpadmm.experiments``
MAY_IMPORT_EXPERIMENTS = {"dpadmm.cli.reproduce", "dpadmm.cli.audit"}


def _name(path: pathlib.Path) -> tuple[str, bool]:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    is_pkg = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_pkg else parts), is_pkg


def imported(name: str, is_pkg: bool, source: str) -> list[tuple[str, int]]:
    """``(absolute module, line)`` for every import in ``source`` (module ``name``), relative ones resolved."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                base = ".".join(pkg[: len(pkg) - (node.level - 1)] + ([node.module] if node.module else []))
            out += [(base, node.lineno)] + [(f"{base}.{a.name}", node.lineno) for a in node.names]
    return out


def violations(name: str, is_pkg: bool, source: str) -> list[str]:
    """The imports of module ``name`` that cross the CLI/experiments line."""
    bad = []
    for target, line in imported(name, is_pkg, source):
        inside = target == "dpadmm.experiments" or target.startswith("dpadmm.experiments.")
        if name.startswith("dpadmm.cli") and inside and name not in MAY_IMPORT_EXPERIMENTS:
            bad.append(f"{name}:{line} imports {target} (only cli/reproduce.py and cli/audit.py may)")
        if name.startswith("dpadmm.experiments") and (target == "dpadmm.cli" or target.startswith("dpadmm.cli.")):
            bad.append(f"{name}:{line} imports {target} (experiments never import the CLI)")
    return sorted(set(bad))


def test_cli_imports_experiments_only_in_reproduce_and_audit():
    bad = []
    for path in sorted((PKG / "cli").rglob("*.py")) + sorted((PKG / "experiments").rglob("*.py")):
        bad += violations(*_name(path), path.read_text(encoding="utf-8"))
    assert not bad, "production code belongs in dpadmm.workflows, dpadmm.data or the algorithm folders:\n" + \
        "\n".join(bad)


def test_the_check_sees_each_crossing():
    """The rule catches a lazy relative import in a command, an absolute one, and experiments importing the CLI; the
    reproduce command is allowed."""
    lazy = "def cmd():\n    from ..experiments.zhang import fig1\n"
    assert violations("dpadmm.cli.consensus", False, lazy) == [
        "dpadmm.cli.consensus:2 imports dpadmm.experiments.zhang (only cli/reproduce.py and cli/audit.py may)",
        "dpadmm.cli.consensus:2 imports dpadmm.experiments.zhang.fig1 (only cli/reproduce.py and cli/audit.py may)"]
    assert violations("dpadmm.cli", True, "import dpadmm.experiments\n")
    assert violations("dpadmm.experiments.hu", False, "from ..cli._common import console\n")
    assert not violations("dpadmm.cli.reproduce", False, "from ..experiments import load_all\n")
    assert not violations("dpadmm.cli.vertical", False, "from ..workflows.vertical import run_vertical\n")
