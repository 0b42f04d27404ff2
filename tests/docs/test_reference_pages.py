"""The reference pages read on GitHub as on the site: plain Markdown, generated and committed.

docs/reference/api.md and the ``--help`` blocks of docs/reference/cli.md are what ``python docs/_ext/reference_md.py``
writes (from the docstrings and the CLI); these tests fail when a docstring, an option or a public method changed and
the pages were not regenerated, and when a page the README sends a reader to shows a raw Sphinx directive there.
"""

from __future__ import annotations

import importlib.util
import re

import pytest

from doc_pages import ROOT

_spec = importlib.util.spec_from_file_location("reference_md", ROOT / "docs" / "_ext" / "reference_md.py")
reference_md = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference_md)

API = ROOT / "docs" / "reference" / "api.md"
CLI = ROOT / "docs" / "reference" / "cli.md"
FIX = "run: python docs/_ext/reference_md.py"


def test_the_api_page_is_current():
    assert API.read_text() == reference_md.api_markdown(), FIX


def test_the_cli_page_is_current():
    page = CLI.read_text()
    assert page.count("<!-- dpadmm-help") >= 13
    assert page == reference_md.cli_markdown(page), FIX


@pytest.mark.parametrize("name", reference_md.ESTIMATORS)
def test_every_public_method_of_every_estimator_is_listed(name):
    cls = reference_md.estimator(name)
    section = API.read_text().split(f"### `{name}`\n")[1].split("\n### ")[0]
    methods = reference_md.public_methods(cls)
    assert {"fit", "predict", "get_params", "set_params"} <= set(methods)
    missing = [m for m in methods if f"\n- `{m}(" not in section]
    assert not missing, f"{name}: {missing}"
    params = set(cls().get_params())  # every constructor parameter is in the signature line
    signature = section.split("```text\n")[1].split("\n```")[0]
    assert all(f"{p}=" in signature for p in params), sorted(p for p in params if f"{p}=" not in signature)


def test_pages_the_readme_links_show_no_raw_directive():
    readme = (ROOT / "README.md").read_text()
    pages = sorted({link for link in re.findall(r"\]\((docs/[^)#]+\.md)", readme)})
    assert len(pages) >= 15, pages
    raw = [p for p in pages if re.search(r"^(```|:::)\{[\w-]+\}", (ROOT / p).read_text(), re.M)]
    assert not raw, f"these pages show raw Sphinx directives on GitHub: {raw}"
