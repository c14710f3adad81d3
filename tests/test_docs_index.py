"""The manual stays navigable: every page of docs/ is listed in docs/index.md, and every relative link in
the repository's Markdown (the README, docs/, the environments' and folders' READMEs) leads to a file that
exists and, when it names an anchor, to a heading that exists.

Links are read as GitHub renders them: inline `[text](target)` links and images outside code, anchors as
GitHub's heading slugs (lowercased, punctuation other than `-` and `_` dropped, spaces as hyphens, a
repeated heading suffixed `-1`, `-2`, ...).
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
INDEX = DOCS / "index.md"
# Not the project's pages: build output, local state (venvs, artifacts) and hidden folders.
SKIPPED = {"var", "build", "dist", "node_modules"}


def skipped(folder: str) -> bool:
    return folder in SKIPPED or folder.startswith(".") or folder.endswith(".egg-info")


def markdown_pages() -> list[Path]:
    """Every Markdown file of the repository, once (a folder reached through a symlink is not read twice)."""
    pages: dict[Path, Path] = {}
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = sorted(d for d in subfolders if not skipped(d))
        for name in sorted(files):
            if name.endswith(".md"):
                path = Path(folder) / name
                pages.setdefault(path.resolve(), path)
    return sorted(pages.values())


PAGES = markdown_pages()

FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
EXTERNAL = ("http://", "https://", "mailto:")


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code, where links and headings mean something."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return "".join(c for c in text if c.isalnum() or c in " -_").replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """Every anchor a Markdown page offers: its headings' slugs, repeats numbered as GitHub does."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def relative_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(prose(page.read_text(encoding="utf-8"))) if not t.startswith(EXTERNAL)]


def broken(page: Path, target: str) -> str | None:
    """Why `target`, linked from `page`, leads nowhere; None when it resolves."""
    path, _, anchor = target.partition("#")
    resolved = (page.parent / path).resolve() if path else page
    if not resolved.exists():
        return f"{target}: no such file"
    if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
        return f"{target}: no heading with the anchor #{anchor} in {resolved.name}"
    return None


def test_every_docs_page_is_listed_in_the_index() -> None:
    listed = {(DOCS / target.partition("#")[0]).resolve() for target in relative_links(INDEX)}
    pages = [p for p in DOCS.rglob("*.md") if p != INDEX]
    orphans = [str(p.relative_to(ROOT)) for p in pages if p.resolve() not in listed]
    assert not orphans, f"docs pages missing from docs/index.md: {orphans}"


def test_the_readme_leads_to_the_index() -> None:
    assert "docs/index.md" in relative_links(ROOT / "README.md")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    problems = [why for target in relative_links(page) if (why := broken(page, target))]
    assert not problems, "\n".join(problems)


def test_the_link_checker_sees_a_broken_file_and_a_broken_anchor(tmp_path: Path) -> None:
    """The checker itself: a missing file and a missing heading are reported, a real one is not."""
    page = tmp_path / "page.md"
    text = "# A `page`: here\n\n## Twice\n\n## Twice\n\n```\n# not a heading\n```\n"
    page.write_text(text, encoding="utf-8")
    assert broken(page, "page.md#a-page-here") is None
    assert broken(page, "#twice-1") is None
    assert broken(page, "missing.md") == "missing.md: no such file"
    assert broken(page, "#not-a-heading") is not None
    assert relative_links(page) == []
    page.write_text("[x](missing.md) `[y](code.md)` [z](https://example.com)\n", encoding="utf-8")
    assert relative_links(page) == ["missing.md"]
