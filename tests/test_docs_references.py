"""The documentation a newcomer reads is in the repository and its references resolve.

- No tracked text file refers to the design, protocol or style documents that were never part of the
  repository (their names are built below from parts, so this file does not match itself); the
  architecture is docs/design.md, the device protocols docs/protocols.md, the conventions
  docs/design.md "Conventions".
- Every relative link in README.md, CONTRIBUTING.md and docs/*.md names a file (or folder) of the
  repository, and a link's ``#anchor`` into a Markdown file names one of its headings.
- Every ``docs/NAME.md, "Section"`` reference in the code and docs names an existing page and a heading
  that starts with that text.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TEXT_SUFFIXES = {".py", ".md", ".toml", ".cfg", ".service", ".ini", ".txt", ".rules", ".conf", ".sh",
                 ".html", ".js", ".css", ".yaml", ".yml"}
EXTRA_FILES = {".ci/run"}
SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".numba_cache", ".pytest_cache"}

GONE = ("DESIGN", "JACKAL_PROTOCOL", "STYLE")
GONE_RE = re.compile(r"\b(?:" + "|".join(GONE) + r")\.md\b")

LINK_RE = re.compile(r"(?<!!)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SECTION_REF_RE = re.compile(r"docs/([A-Za-z0-9_-]+\.md),? \(?\"([^\"]+)\"")
FENCE_RE = re.compile(r"^\s*(```|~~~)")


def tracked_files() -> list[str]:
    """Paths (relative, POSIX) of the repository's files (tracked, or new and not ignored): ``git ls-files``,
    else a walk of the tree."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True, timeout=60)
        files = [f for f in out.stdout.decode("utf-8").split("\0") if f]
        if files:
            return [f for f in files if (ROOT / f).is_file()]  # deleted but not yet committed: gone
    except (OSError, subprocess.SubprocessError):
        pass
    return sorted(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
                  if p.is_file() and not SKIP_DIRS.intersection(p.relative_to(ROOT).parts))


def text_files(files: list[str]) -> list[str]:
    return [f for f in files if Path(f).suffix in TEXT_SUFFIXES or f in EXTRA_FILES]


def doc_pages(files: list[str]) -> list[str]:
    return [f for f in files if f in ("README.md", "CONTRIBUTING.md")
            or (f.startswith("docs/") and f.endswith(".md") and f.count("/") == 1)]


def _prose_lines(text: str):
    """``(line number, line)`` of the Markdown text outside fenced code blocks, inline code removed."""
    fenced = False
    for i, line in enumerate(text.splitlines(), 1):
        if FENCE_RE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield i, re.sub(r"`[^`]*`", "", line)


def headings(text: str) -> list[str]:
    """Heading texts of a Markdown page (ATX headings outside code blocks), inline code marks removed."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE_RE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            out.append(m.group(1).replace("`", ""))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for h in headings(text):
        base = slug(h)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


FILES = tracked_files()
TRACKED = set(FILES)
TRACKED_DIRS = {p.as_posix() for f in FILES for p in Path(f).parents if p.as_posix() != "."}


def test_the_repository_is_listed():
    assert "README.md" in TRACKED and "docs/design.md" in TRACKED and "docs/protocols.md" in TRACKED
    assert "CONTRIBUTING.md" in TRACKED


def test_no_reference_to_documents_outside_the_repository():
    hits = []
    for f in text_files(FILES):
        if f == "tests/test_docs_references.py":
            continue
        try:
            text = (ROOT / f).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for i, line in enumerate(text.splitlines(), 1):
            if GONE_RE.search(line):
                hits.append(f"{f}:{i}: {line.strip()[:100]}")
    assert not hits, ("references to documents that are not in the repository (point at docs/design.md, "
                      "docs/protocols.md or the primary source instead):\n" + "\n".join(hits))


@pytest.mark.parametrize("page", doc_pages(FILES))
def test_relative_links_resolve(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    base = Path(page).parent
    broken = []
    for i, line in _prose_lines(text):
        for target in LINK_RE.findall(line):
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # https:, mailto:, file:
                continue
            path, _, anchor = target.partition("#")
            if path:
                resolved = (ROOT / base / path).resolve()
                try:
                    rel = resolved.relative_to(ROOT).as_posix()
                except ValueError:
                    broken.append(f"{page}:{i}: {target} (outside the repository)")
                    continue
                if rel not in TRACKED and rel not in TRACKED_DIRS:
                    broken.append(f"{page}:{i}: {target} (no such file in the repository)")
                    continue
            else:
                rel = page
            if anchor and rel.endswith(".md") and anchor not in anchors((ROOT / rel).read_text(encoding="utf-8")):
                broken.append(f"{page}:{i}: {target} (no heading with that anchor in {rel})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_section_references_name_existing_headings():
    broken = []
    pages: dict[str, list[str]] = {}
    for f in text_files(FILES):
        if f == "tests/test_docs_references.py":
            continue
        text = (ROOT / f).read_text(encoding="utf-8", errors="replace")
        for m in SECTION_REF_RE.finditer(text):
            page, section = "docs/" + m.group(1), " ".join(m.group(2).split())
            line = text.count("\n", 0, m.start()) + 1
            if page not in TRACKED:
                broken.append(f"{f}:{line}: {page} does not exist")
                continue
            if page not in pages:
                pages[page] = [h.lower() for h in headings((ROOT / page).read_text(encoding="utf-8"))]
            if not any(h.startswith(section.lower()) for h in pages[page]):
                broken.append(f"{f}:{line}: {page} has no section {section!r}")
    assert not broken, "section references that do not resolve:\n" + "\n".join(broken)


def test_the_checkers_work():
    assert GONE_RE.search("see " + GONE[0] + ".md, Fallbacks")
    assert not GONE_RE.search("see docs/design.md, Fallbacks")
    assert slug("ROS 2 robots: the ros2 backend") == "ros-2-robots-the-ros2-backend"
    assert slug("Drive commands, timeout and e-stop") == "drive-commands-timeout-and-e-stop"
    page = "# T\n\n## A b\n\n```\n## not a heading\n```\n\n## A b\n"
    assert anchors(page) == {"t", "a-b", "a-b-1"}
    assert LINK_RE.findall("[x](docs/a.md#b) and ![img](p.png) and [y](https://e.org)") == \
        ["docs/a.md#b", "https://e.org"]
    assert SECTION_REF_RE.findall('(docs/design.md, "Fallbacks") and docs/lasp.md ("Small local LLM")') == \
        [("design.md", "Fallbacks"), ("lasp.md", "Small local LLM")]
