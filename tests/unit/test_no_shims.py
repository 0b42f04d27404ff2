"""No compatibility paths (issue 39, item 4): every name is imported from its one home.

The flat modules that only re-exported a moved module (``algorithms/vertical_sharing.py`` … ``privacy/zhou.py``) are
gone, and nothing may import them again — not ``src/``, the tests, the benchmarks, the examples or the red-team
reproducers, neither by an import statement nor by a dotted name in a string (``mock.patch("dpadmm.….name")``,
``python -c "import …"``). A new shim is caught without a list: a module of ``src/dpadmm`` (other than a package's
``__init__``) whose body is nothing but imports, or a module-level ``__getattr__`` (how a moved name stays importable
from its old module; ``dpadmm/__init__.py``'s lazy public API is the one allowed). No ``dpadmm._compat`` exists: no
pickle written by dpadmm names an old path (checkpoints are written by the code that reads them; no saved model or
checkpoint ships with the package or its tests).

Docstring references are checked too: every ``:mod:`` reference (relative ones from the module's package) names a
module that exists, and every absolute ``:role:`dpadmm.…``` reference names an existing module and, if it goes on, a
name that module binds at its top level.

Read from the source with :mod:`ast` and regular expressions (nothing is imported).
"""

from __future__ import annotations

import ast
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[2]
SRC = REPO / "src"
PKG = SRC / "dpadmm"
#: where code that imports dpadmm lives
IMPORTERS = ("src", "tests", "benchmarks", "examples", "redteam")

#: the old module paths removed by issue 39 (each name now lives in its algorithm folder, fit/ or data/)
REMOVED = (
    "dpadmm.algorithms.consensus_baseline", "dpadmm.algorithms.functional_quantile",
    "dpadmm.algorithms.functional_statistics", "dpadmm.algorithms.graph_consensus", "dpadmm.algorithms.policies",
    "dpadmm.algorithms.vertical_data", "dpadmm.algorithms.vertical_experts", "dpadmm.algorithms.vertical_experts_party",
    "dpadmm.algorithms.vertical_label", "dpadmm.algorithms.vertical_scoring", "dpadmm.algorithms.vertical_sgd",
    "dpadmm.algorithms.vertical_sharing", "dpadmm.data.psi", "dpadmm.privacy.reports", "dpadmm.privacy.zhang",
    "dpadmm.privacy.zhou",
    # the vertical family's drivers, moved into their algorithm folders (algorithms/<alg>/driver.py)
    "dpadmm.fit.vertical", "dpadmm.fit.experts", "dpadmm.fit.encrypted", "dpadmm.fit.gossip", "dpadmm.fit.consensus",
    "dpadmm.fit.functional",
)
#: a compatibility alias module, were one ever needed for old pickles: nothing may import it
COMPAT = "dpadmm._compat"
FORBIDDEN = REMOVED + (COMPAT,)
#: the one module-level ``__getattr__`` allowed: ``import dpadmm`` loads the estimators on first use
LAZY_API = {"dpadmm"}


def _module_name(path: pathlib.Path) -> tuple[str, bool]:
    parts = list(path.relative_to(SRC if path.is_relative_to(SRC) else REPO).with_suffix("").parts)
    is_pkg = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_pkg else parts), is_pkg


def _sources():
    for top in IMPORTERS:
        yield from sorted((REPO / top).rglob("*.py"))


def _imported(path: pathlib.Path, tree: ast.AST) -> list[tuple[str, int]]:
    """``(module or module.name, line)`` for every import statement anywhere in the file (relative ones resolved)."""
    name, is_pkg = _module_name(path)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                base = ".".join(pkg[: len(pkg) - (node.level - 1)] + ([node.module] if node.module else []))
            out += [(base, node.lineno)] + [(f"{base}.{a.name}", node.lineno) for a in node.names]
    return out


def _forbidden(target: str) -> str | None:
    """The forbidden path ``target`` is or lies in, else None."""
    return next((f for f in FORBIDDEN if target == f or target.startswith(f + ".")), None)


_DOTTED = re.compile(r"\b(" + "|".join(re.escape(f) for f in FORBIDDEN) + r")\b(?![\w])")


def compatibility_imports(path: pathlib.Path, text: str) -> list[str]:
    """Where ``text`` (the file at ``path``) imports a forbidden path or names one as a dotted string."""
    rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    hits = [f"{rel}:{line} imports {_forbidden(t)}" for t, line in _imported(path, ast.parse(text)) if _forbidden(t)]
    for m in _DOTTED.finditer(text):
        hits.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1} names {m.group(1)}")
    return sorted(set(hits))


def test_nothing_imports_a_compatibility_path():
    bad = [hit for path in _sources() if path != pathlib.Path(__file__).resolve()
           for hit in compatibility_imports(path, path.read_text())]
    assert not bad, "import these names from their home module (the old path re-exported it):\n" + "\n".join(bad)


def test_the_removed_modules_and_no_compat_module_exist():
    present = [m for m in FORBIDDEN if (SRC / (m.replace(".", "/") + ".py")).exists()
               or (SRC / m.replace(".", "/") / "__init__.py").exists()]
    assert not present, f"compatibility modules are back: {present}"


def _is_reexport_only(tree: ast.Module) -> bool:
    body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    return bool(body) and all(isinstance(n, (ast.Import, ast.ImportFrom)) or (
        isinstance(n, ast.Assign) and [getattr(t, "id", None) for t in n.targets] == ["__all__"]) for n in body)


def test_no_module_is_a_re_export_shim_or_resolves_names_lazily():
    shims, lazy = [], []
    for path in sorted(PKG.rglob("*.py")):
        name, is_pkg = _module_name(path)
        tree = ast.parse(path.read_text())
        if not is_pkg and _is_reexport_only(tree):
            shims.append(name)
        if name not in LAZY_API and any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body):
            lazy.append(name)
    assert not shims, f"modules holding only imports (a moved module's old path: import from the new one): {shims}"
    assert not lazy, f"module-level __getattr__ (old names kept importable): {lazy}"


def test_the_checks_find_a_planted_compatibility_path():
    planted = PKG / "fit" / "planted.py"
    text = ("from ..algorithms import vertical_sharing as vs\nfrom dpadmm.privacy.zhou import zhou_sigma\n"
            "import dpadmm._compat\nfrom ..algorithms.vertical import party\n"
            "PATCH = 'dpadmm.algorithms.graph_consensus.block_step'\nOK = 'dpadmm.algorithms.vertical_sharing_notes'\n")
    hits = compatibility_imports(planted, text)
    assert [h.split(":", 1)[1] for h in hits] == [
        "1 imports dpadmm.algorithms.vertical_sharing", "2 imports dpadmm.privacy.zhou", "2 names dpadmm.privacy.zhou",
        "3 imports dpadmm._compat", "3 names dpadmm._compat", "5 names dpadmm.algorithms.graph_consensus"], hits
    assert _is_reexport_only(ast.parse('"""Moved."""\nfrom .vertical.party import x  # noqa: F401\n__all__ = ["x"]\n'))
    assert not _is_reexport_only(ast.parse('"""A module."""\nfrom .party import x\n\n\ndef f():\n    return x\n'))


# ----------------------------------------------------------------------------- docstring references
_ROLE = re.compile(r":(mod|func|class|meth|data|attr|exc|obj):`~?([\w.]+)`")


def _modules() -> dict[str, ast.Module]:
    return {_module_name(p)[0]: ast.parse(p.read_text()) for p in sorted(PKG.rglob("*.py"))}


def _top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                names.update(x.id for x in ast.walk(t) if isinstance(x, ast.Name))
                if getattr(t, "id", None) == "__all__" and n.value is not None:  # dpadmm's lazily imported names
                    names.update(c.value for c in ast.walk(n.value) if isinstance(c, ast.Constant))
    return names


def dangling_references(name: str, is_pkg: bool, text: str, modules: dict[str, ast.Module]) -> list[str]:
    """The ``:mod:`` references of module ``name`` (relative ones from its package) that name no module, and its
    absolute ``dpadmm.…`` references whose module does not exist or does not bind the next name."""
    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
    bad = []
    for m in _ROLE.finditer(text):
        role, ref = m.groups()
        where = f"{name}:{text.count(chr(10), 0, m.start()) + 1} :{role}:`{ref}`"
        if ref.startswith("."):
            level = len(ref) - len(ref.lstrip("."))
            ref = ".".join(pkg[: len(pkg) - (level - 1)] + [ref.lstrip(".")])
            if role == "mod" and ref not in modules:
                bad.append(where)
            continue
        if not ref.startswith("dpadmm"):
            continue
        parts = ref.split(".")
        k = len(parts)
        while k and ".".join(parts[:k]) not in modules:
            k -= 1
        if role == "mod" and k != len(parts):
            bad.append(where)
        elif k < len(parts) and parts[k] not in _top_level_names(modules[".".join(parts[:k])]):
            bad.append(where)
    return bad


def test_docstring_references_name_existing_modules():
    modules = _modules()
    bad = [hit for p in sorted(PKG.rglob("*.py"))
           for hit in dangling_references(*_module_name(p), p.read_text(), modules)]
    assert not bad, "references to modules or names that do not exist (the module moved?):\n" + "\n".join(bad)


def test_the_reference_check_finds_a_planted_dangling_reference():
    modules = _modules()
    text = ("See :mod:`.no_such_module`, :mod:`.party`, :mod:`dpadmm.algorithms.vertical_sharing`, "
            ":func:`dpadmm.algorithms.vertical.party.no_such_step`, :func:`dpadmm.algorithms.vertical.party.party_step`"
            " and :class:`~dpadmm.protocol.spec.PartyData`.")
    bad = dangling_references("dpadmm.algorithms.experts.model", False, text, modules)
    assert [b.split(" ", 1)[1] for b in bad] == [
        ":mod:`.no_such_module`", ":mod:`dpadmm.algorithms.vertical_sharing`",
        ":func:`dpadmm.algorithms.vertical.party.no_such_step`"]
