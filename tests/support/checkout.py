"""The harness checkout these tests run in (the harness itself never computes it: harness/resources.py)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def repo_root() -> Path:
    """The checkout's root folder (the one holding pyproject.toml)."""
    return REPO
