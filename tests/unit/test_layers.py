"""The import graph follows the architecture: algorithms and backends both depend on the protocol
layer (``dpadmm.protocol``), neither on the other; kernels depend on neither. An algorithm folder's driver
(``driver*.py``: it runs the folder's protocol on a backend) sits on top of its folder and may import the engine
and the backends, never the estimators or the CLI."""

#: what an algorithm folder's driver modules may import beyond the rest of the folder
DRIVER_MAY_IMPORT = ("backends", "engine")

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "dpadmm"


def _imports(pkg: str):
    for path in sorted((SRC / pkg).rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                mod = ("." * node.level) + (node.module or "")
                yield path.name, mod
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    yield path.name, alias.name


@pytest.mark.parametrize("pkg,forbidden", [
    ("algorithms", ("backends", "cli", "estimators", "engine")),
    ("kernels", ("backends", "algorithms", "cli", "estimators", "engine", "protocol")),
    ("backends", ("algorithms", "estimators", "cli")),
])
def test_layer_does_not_import(pkg, forbidden):
    bad = []
    for fname, mod in _imports(pkg):
        parts = mod.lstrip(".").split(".")
        rel = mod.startswith("..") or mod.startswith("dpadmm.")
        head = parts[1] if mod.startswith("dpadmm.") and len(parts) > 1 else parts[0]
        if pkg == "algorithms" and fname.startswith("driver") and head in DRIVER_MAY_IMPORT:
            continue
        if rel and head in forbidden:
            bad.append(f"{pkg}/{fname}: {mod}")
    assert not bad, "layering violated:\n" + "\n".join(bad)


def test_protocol_layer_imports_no_algorithm_or_backend_statically():
    for path in sorted((SRC / "protocol").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                mod = (node.module or "").removeprefix("dpadmm.")
                assert not mod.startswith(("backends", "algorithms")), (path.name, node.module)
