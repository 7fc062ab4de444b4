"""The repository stands alone: no code, test or doc cites a document that is not in it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("*.py", "*.md", "*.toml", "*.sh", "*.ini", "*.cfg", "*.mako")
SKIP = {".venv", ".git", "build", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
# Documents that live beside the repository, not in it.
OUTSIDE = re.compile(r"DESIGN\.md|SGLANG\.md|STYLE\.md|\.\./shared|shared/spec|shared/[A-Z]")


def _files() -> list[Path]:
    found: list[Path] = []
    for pattern in SOURCES:
        found += [
            p for p in ROOT.rglob(pattern) if not SKIP.intersection(p.relative_to(ROOT).parts)
        ]
    return sorted(found)


def test_nothing_cites_a_document_outside_the_repository() -> None:
    here = Path(__file__).resolve()
    cites = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in _files()
        if path != here
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert cites == []


def test_every_doc_link_points_at_a_file_in_the_repository() -> None:
    broken = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if "://" not in target and not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert broken == []
