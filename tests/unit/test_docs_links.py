"""The docs point at things that exist: every relative link in README.md, CHANGELOG.md and
docs/ reaches a file (and, for a Markdown file, the heading its `#anchor` names, as GitHub
spells anchors), and every repository path (`service/prompts/window.py`,
`adapters/http/app.py`), module (`service.ports.Engine`) or import
(`from adapters.store.factory import open_store`) they cite is in the repository.

A module moved or renamed without its citations updated fails here, with the list of the
places to fix (file:line: what it cites).
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^()\s]+)\)")
TOP = ("adapters", "service", "domain", "tests", "bench", "migrations", "docs", ".ci")
# A path that starts at one of the repository's top folders, not preceded by a character of a
# longer path or URL; a pattern (`*`, `<day>`, `{id}`, `…`) names no one file and is let be.
CITED_PATH = re.compile(
    r"(?<![\w/.~-])((?:" + "|".join(re.escape(t) for t in TOP) + r")/[\w./*<>{}…-]*)"
)
PATTERN = re.compile(r"[*<>{}…]")
CITED_MODULE = re.compile(r"`((?:adapters|service|domain)(?:\.\w+)+)`")
IMPORT = re.compile(r"\bfrom ((?:adapters|service|domain)(?:\.\w+)*) import (\w+(?:, \w+)*)")
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


def module_file(dotted: str) -> Path | None:
    base = ROOT.joinpath(*dotted.split("."))
    for file in (base.with_suffix(".py"), base / "__init__.py"):
        if file.is_file():
            return file
    return None


@cache
def top_level_names(file: Path) -> frozenset[str]:
    """What `from module import name` can take: the module's top-level definitions,
    assignments and imports."""
    names: set[str] = set()
    for node in ast.parse(file.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            names.update(
                n.id for target in node.targets for n in ast.walk(target) if isinstance(n, ast.Name)
            )
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return frozenset(names)


def importable(module: str, name: str) -> bool:
    file = module_file(module)
    if file is None:
        return False
    return name in top_level_names(file) or module_file(f"{module}.{name}") is not None


def test_every_cited_import_resolves() -> None:
    """`from service.x import y` in the docs (a code block or inline) names a module of the
    repository and a name it defines or imports."""
    missing = [
        f"{rel(page)}:{number}: from {module} import {name}"
        for page in PAGES
        for number, line in enumerate(page.read_text().splitlines(), 1)
        for module, names in IMPORT.findall(line)
        for name in names.split(", ")
        if not importable(module, name)
    ]
    assert missing == [], "cited imports that do not resolve:\n" + "\n".join(missing)


def test_github_anchors_are_spelled_as_github_does() -> None:
    """Backticks and punctuation go, spaces become hyphens, hyphens stay."""
    assert github_anchor("`resplog serve`") == "resplog-serve"
    assert github_anchor("Input: images, files, tools and items") == (
        "input-images-files-tools-and-items"
    )
    assert github_anchor("verify --all at 100 M events") == "verify---all-at-100-m-events"
