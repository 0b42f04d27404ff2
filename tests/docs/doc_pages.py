"""The user documentation the docs tests read: README.md and every Markdown page of the documentation site
(docs/**/*.md, the build output excluded). Content moved from the README to a page stays checked."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md",
         *sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.relative_to(ROOT / "docs").parts)]
# one text for the regular-expression checks: the pages one after another, each starting on a new paragraph
TEXT = "\n\n".join(p.read_text() for p in PAGES)


def where(path: Path) -> str:
    return str(path.relative_to(ROOT))
