"""The docs point at things that exist: every relative link in README.md and docs/ reaches a
file (and, for a Markdown file, the heading its `#anchor` names, as GitHub spells anchors), and
every repository path (`service/prompts/window.py`, `adapters/http/app.py`) or module
(`service.ports.Engine`) the docs cite is in the repository.

A module moved or renamed without its citations updated fails here, with the list of the
places to fix (file:line: what it cites).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^()\s]+)\)")
TOP = ("adapters", "service", "domain", "tests", "bench", "migrations", "docs", ".ci")
# A path that starts at one of the repository's top folders, not preceded by a character of a
# longer path or URL; a pattern (`*`, `<day>`, `{id}`, `…`) names no one file and is let be.
CITED_PATH = re.compile(
    r"(?<![\w/.~-])((?:" + "|".join(re.escape(t) for t in TOP) + r")/[\w./*<>{}…-]*)"
)
PATTERN = re.compile(r"[*<>{}…]")
CITED_MODULE = re.compile(r"`((?:adapters|service|domain)(?:\.\w+)+)`")
# What a test run makes and git does not hold.
GENERATED = ("node_modules",)


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (letters, digits, `_`,
    `-` and spaces kept), spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        match = None if in_code else re.match(r"#{1,6} (.*)", line)
        if match:
            anchor = github_anchor(match.group(1))
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            found.add(anchor if count == 0 else f"{anchor}-{count}")
    return frozenset(found)


def prose_lines(page: Path) -> list[tuple[int, str]]:
    """The page's lines outside fenced code blocks, numbered."""
    lines, in_code = [], False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code:
            lines.append((number, line))
    return lines


def broken_link(page: Path, target: str) -> str | None:
    if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
        return None
    path_part, _, anchor = target.partition("#")
    file = (page.parent / path_part).resolve() if path_part else page
    if not file.exists():
        return "no such file"
    if anchor and file.suffix == ".md" and anchor not in anchors(file):
        return f"no heading #{anchor} in {rel(file)}"
    return None


def test_every_relative_link_reaches_its_file_and_heading() -> None:
    """`[text](page.md#heading)` in README.md and docs/: the file exists, and so does the
    heading."""
    broken = [
        f"{rel(page)}:{number}: ({target}) {why}"
        for page in PAGES
        for number, line in prose_lines(page)
        for target in LINK.findall(line)
        if (why := broken_link(page, target))
    ]
    assert broken == [], "links to nothing:\n" + "\n".join(broken)


def missing_path(cited: str) -> bool:
    cited = cited.rstrip(".,;:")
    if PATTERN.search(cited) or any(part in GENERATED for part in cited.split("/")):
        return False
    return not (ROOT / cited).exists()


def test_every_cited_repository_path_exists() -> None:
    """A path the docs cite (in backticks or not, in code blocks too) names a file or folder
    of the repository."""
    missing = [
        f"{rel(page)}:{number}: {cited.rstrip('.,;:')}"
        for page in PAGES
        for number, line in enumerate(page.read_text().splitlines(), 1)
        for cited in CITED_PATH.findall(line)
        if missing_path(cited)
    ]
    assert missing == [], "cited paths that are not in the repository:\n" + "\n".join(missing)


def module_exists(dotted: str) -> bool:
    """The longest prefix of `a.b.c.Name` that is a module or package; at least `a.b`."""
    parts = dotted.split(".")
    for end in range(len(parts), 1, -1):
        base = ROOT.joinpath(*parts[:end])
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return True
    return False


def test_every_cited_module_exists() -> None:
    """A dotted module the docs cite (`service.ports.Engine`) is a module of the repository."""
    missing = [
        f"{rel(page)}:{number}: {dotted}"
        for page in PAGES
        for number, line in enumerate(page.read_text().splitlines(), 1)
        for dotted in CITED_MODULE.findall(line)
        if not module_exists(dotted)
    ]
    assert missing == [], "cited modules that are not in the repository:\n" + "\n".join(missing)


def test_github_anchors_are_spelled_as_github_does() -> None:
    """Backticks and punctuation go, spaces become hyphens, hyphens stay."""
    assert github_anchor("`resplog serve`") == "resplog-serve"
    assert github_anchor("Input: images, files, tools and items") == (
        "input-images-files-tools-and-items"
    )
    assert github_anchor("verify --all at 100 M events") == "verify---all-at-100-m-events"
