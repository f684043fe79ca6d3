"""The README and docs/ as a reader follows them: every relative link reaches a file, and every
`#anchor` a heading of that file (GitHub's slugs), so a section moved between documents leaves
no dead link behind."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"```.*?```", re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(document: Path) -> set[str]:
    text = FENCE.sub("", document.read_text())
    return {slug(m[2]) for m in re.finditer(r"^(#+)\s+(.*)$", text, re.M)}


def test_every_link_of_the_readme_and_docs_leads_somewhere() -> None:
    broken = []
    for document in DOCUMENTS:
        for target in LINK.findall(FENCE.sub("", document.read_text())):
            if re.match(r"[a-z]+:", target):  # http(s), mailto: not this repository's
                continue
            path, _, anchor = target.partition("#")
            destination = (document.parent / path).resolve() if path else document
            if not destination.exists():
                broken.append(f"{document.relative_to(ROOT)}: no file {target}")
            elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
                broken.append(f"{document.relative_to(ROOT)}: no heading for {target}")
    assert broken == []


def test_the_readme_is_a_front_door_and_names_every_document() -> None:
    """Short, with the two set-up commands, and a way to each reference document."""
    readme = (ROOT / "README.md").read_text()
    assert "make run" in readme and "make test" in readme
    assert len(readme.splitlines()) < 200
    unlinked = [d.name for d in DOCUMENTS[1:] if f"docs/{d.name}" not in readme]
    assert unlinked == []
