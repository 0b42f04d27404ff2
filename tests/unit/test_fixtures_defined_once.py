"""A test module never imports a pytest fixture from another test module.

pytest registers a fixture in every module that holds it, so ``from test_backends import ray_session`` makes a
second fixture of that name, with its own session cache: the first module's ``ray_session`` had started Ray, the
second one's ``ray.init`` then failed ("ray.init twice"), and every Ray case of the hostile-Setup test failed in
sequence after the backend tests in the same run (each passed alone). Shared fixtures live in ``tests/conftest.py``.

Read from the source with :mod:`ast` (nothing is imported).
"""

from __future__ import annotations

import ast
import pathlib

TESTS = pathlib.Path(__file__).resolve().parents[1]


def _is_fixture(decorator: ast.expr) -> bool:
    node = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(node, ast.Attribute) and node.attr == "fixture") or (
        isinstance(node, ast.Name) and node.id == "fixture")


def _fixtures(tree: ast.Module) -> set[str]:
    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and any(_is_fixture(d) for d in node.decorator_list)}


def imported_fixtures(modules: dict[str, ast.Module]) -> list[str]:
    """``"importer: module.name"`` for every fixture of a module in ``modules`` (by stem) that another imports."""
    fixtures = {stem: _fixtures(tree) for stem, tree in modules.items()}
    found = []
    for importer, tree in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in fixtures and node.level == 0:
                found += [f"{importer}: {node.module}.{a.name}" for a in node.names if a.name in fixtures[node.module]]
    return found


def _test_modules() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(), str(p)) for p in TESTS.rglob("*.py") if p.name != "conftest.py"}


def test_no_test_module_imports_another_ones_fixture():
    assert imported_fixtures(_test_modules()) == []


def test_the_check_sees_an_imported_fixture():
    """The check itself: the import the hostile-Setup test had (``ray_session`` from ``test_backends``) is found."""
    modules = {
        "test_backends": ast.parse('import pytest\n\n@pytest.fixture(scope="session")\ndef ray_session():\n'
                                   '    yield\n\nRAY_MARKS = []\n'),
        "test_hostile": ast.parse("from test_backends import RAY_MARKS, ray_session\n"),
    }
    assert imported_fixtures(modules) == ["test_hostile: test_backends.ray_session"]
