"""Regenerate the backend capability table of docs/compose.md from the code that decides it
(:mod:`harness.topology.capabilities`), and the manager-topology table of docs/ha-managers.md
(:mod:`harness.topology.managed`). Run after changing what a backend or a manager can do:

    .venv/bin/python scripts/capability_table.py            # rewrites docs/compose.md and docs/ha-managers.md
    .venv/bin/python scripts/capability_table.py --print    # prints the table only

``tests/test_capabilities.py`` and ``tests/test_managed_topology.py`` fail while a document differs
from the rendering.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.topology import managed  # noqa: E402
from harness.topology.capabilities import markdown, with_table  # noqa: E402

DOC = ROOT / "docs" / "compose.md"
MANAGED_DOC = ROOT / "docs" / "ha-managers.md"


def main(argv: list[str]) -> int:
    """Print the table (``--print``) or rewrite it between its markers in docs/compose.md."""
    if argv == ["--print"]:
        sys.stdout.write(markdown())
        return 0
    if argv:
        print("usage: scripts/capability_table.py [--print]", file=sys.stderr)
        return 2
    DOC.write_text(with_table(DOC.read_text()))
    MANAGED_DOC.write_text(managed.with_table(MANAGED_DOC.read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
