"""Every relative link of the user docs (README.md, docs/, benchmarks/results/) reaches a file of the
repository, and a link with ``#anchor`` into a Markdown file reaches one of its headings (GitHub's
heading IDs) or an explicit ``<a id=…>``: moving or renaming a section cannot leave a dead link."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")


def doc_files() -> list[Path]:
    """The Markdown files whose links are checked."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "benchmarks").rglob("*.md"))]


def slug(heading: str) -> str:
    """GitHub's ID of a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a link into ``path`` may name."""
    text = FENCE.sub("", path.read_text())
    seen: dict[str, int] = {}
    found = set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        found.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return found


def dead_links(path: Path) -> list[str]:
    """The relative links of ``path`` that reach no file, or no anchor of the Markdown file they name."""
    text = CODE.sub("", FENCE.sub("", path.read_text()))
    dead = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto: …
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            dead.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            dead.append(f"{target} (no such heading)")
    return dead


def test_every_relative_link_of_the_docs_resolves() -> None:
    dead = {str(p.relative_to(REPO)): d for p in doc_files() if (d := dead_links(p))}
    assert dead == {}


def test_a_dead_file_or_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title: the *first* one\n\n## Run it (`--x`)\n\n## Run it (`--x`)\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#title-the-first-one) [ok](a.md#run-it---x) [ok](a.md#run-it---x-1) "
                    "[gone](a.md#nope) [gone](c.md) `[code](c.md)` [here](#nowhere)\n")
    assert dead_links(page) == ["a.md#nope (no such heading)", "c.md (no such file)", "#nowhere (no such heading)"]
