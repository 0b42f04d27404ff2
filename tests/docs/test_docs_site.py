"""The documentation site builds with Sphinx, warnings as errors, as the README says (``python -m sphinx -W -b html
docs docs/_build/html``), and every page of docs/ is in its table of contents. Skipped where the ``docs`` extra is
not installed (``pip install -e ".[docs]"``); CI (``.ci/run``) installs it, so this is CI's build of the site."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from doc_pages import ROOT

README = (ROOT / "README.md").read_text()


def test_readme_gives_the_build_command_and_stays_short():
    assert "python -m sphinx -W -b html docs docs/_build/html" in README
    assert len(README.splitlines()) <= 150, len(README.splitlines())


def test_every_page_is_in_a_toctree():
    """A page left out of every toctree is a Sphinx warning (an error under -W); checked here without Sphinx."""
    index = (ROOT / "docs" / "index.md").read_text()
    listed = set(re.findall(r"^([\w/.-]+)$", "\n".join(re.findall(r"```\{toctree\}\n(.*?)```", index, re.S)), re.M))
    pages = {str(p.relative_to(ROOT / "docs").with_suffix("")) for p in (ROOT / "docs").rglob("*.md")
             if "_build" not in p.parts and p.name != "index.md"}
    assert pages <= listed, sorted(pages - listed)


def test_readme_links_resolve():
    """Every relative link of the README points at a file of the repository."""
    links = re.findall(r"\]\((?!https?:)([^)#]+)", README)
    assert links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing


@pytest.mark.slow
def test_sphinx_build_has_no_warnings(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    pytest.importorskip("furo")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(ROOT / "docs"),
                           str(tmp_path / "html")], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-5000:]
    for page in ("reference/api", "reference/cli", "reference/metrics", "tutorials/two-organisations",
                 "explanation/privacy", "algorithms"):
        assert (tmp_path / "html" / f"{page}.html").exists(), page
    cli = (tmp_path / "html" / "reference" / "cli.html").read_text()
    assert "Usage: dpadmm party serve" in cli and "Usage: dpadmm vertical" in cli
    api = (tmp_path / "html" / "reference" / "api.html").read_text()
    assert "VerticalExpertsClassifier" in api and "PrivacyLedger" in api


def test_readme_figures_are_the_pages_figures():
    """Every figure of the README's "Which protocol?" table and demo output is one the documentation pages or
    BENCHMARKS.md state (where the tests that run the commands check it): the README quotes, never invents."""
    pages = "\n".join(p.read_text() for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)
    pages += (ROOT / "BENCHMARKS.md").read_text()
    section = README.split("## Which protocol?")[1].split("\n## ")[0]
    figures = set(re.findall(r"(?<![\w.])\d+\.\d+(?![\d])", section)) | set(re.findall(r"\d+–\d+%", section))
    assert len(figures) >= 10, figures
    missing = sorted(f for f in figures if f not in pages)
    assert not missing, f"the README quotes figures no page states: {missing}"
