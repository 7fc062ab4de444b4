"""`python -m bench`: the benches, one line each: its name and the question it answers
(its docstring's first line), found as `bench/*_bench.py`."""

from __future__ import annotations

import ast
from pathlib import Path


def benches() -> list[tuple[str, str]]:
    """(name, question) of every bench, read from its source (none is imported)."""
    found = []
    for path in sorted(Path(__file__).parent.glob("*_bench.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        found.append((path.stem, doc.split("\n", 1)[0]))
    return found


def main() -> None:
    listed = benches()
    width = max(len(name) for name, _ in listed)
    for name, question in listed:
        print(f"{name + ':':<{width + 1}} {question}")
    print(
        "\nRun one with `.venv/bin/python bench/NAME.py --help` (it says how to rerun its figures)."
    )


if __name__ == "__main__":
    main()
