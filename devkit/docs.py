"""``make docs``: put the gate's schema and the writer's statements into the docs from their one source.

Blocks between ``<!-- generated: NAME -->`` and ``<!-- end: NAME -->`` are rewritten from the source NAME
stands for; everything else in the files is left as written. ``tests/unit/test_docs.py`` fails while a block
differs from its source.
"""

from __future__ import annotations

import re
import sys
from importlib.resources import files
from pathlib import Path

from airflow_iceberg.core import gate_protocol as write_gate
from airflow_iceberg.hooks.write_gate_schema import SCHEMA_FILE

DOCS = Path(__file__).resolve().parents[1] / "docs"
_BLOCK = re.compile(r"(<!-- generated: (\S+) -->\n)(.*?)(<!-- end: \2 -->)", re.DOTALL)


def sources() -> dict[str, str]:
    """Each block name and the text its block shows."""
    statements = {name: value + "\n" for name, value in vars(write_gate).items() if name.endswith("_SQL")}
    return {SCHEMA_FILE: files("airflow_iceberg.hooks").joinpath(SCHEMA_FILE).read_text(), **statements}


def render(text: str) -> str:
    """``text`` with every generated block rewritten; an unknown block name is an error naming it."""
    known = sources()

    def block(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in known:
            raise KeyError(f"generated block {name!r} has no source; known: {', '.join(known)}")
        return f"{match.group(1)}```sql\n{known[name]}```\n{match.group(4)}"

    return _BLOCK.sub(block, text)


def stale() -> list[Path]:
    """The doc files whose generated blocks differ from their sources."""
    return [path for path in sorted(DOCS.glob("*.md")) if render(path.read_text()) != path.read_text()]


def main() -> int:
    for path in stale():
        path.write_text(render(path.read_text()))
        print(f"updated {path.relative_to(DOCS.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
