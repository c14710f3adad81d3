"""Writing a benchmark's results into its own section of a Markdown page, keeping every other section."""

from __future__ import annotations

from pathlib import Path


def replace_section(path: Path, heading: str, section: str) -> None:
    """Replace the section that starts at `heading` (up to the next `## ` heading) with `section`, or
    append `section` when the page has no such heading yet."""
    text = path.read_text(encoding="utf-8")
    if heading in text:
        start = text.index(heading)
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + section + (text[end + 1 :] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text, encoding="utf-8")
