"""``[tool.mutation]`` in ``pyproject.toml``: what is mutated, which tests judge it, the bar, and the
equivalent mutants excluded (each with its reason). Bad settings are one line naming the fix."""

from __future__ import annotations

import glob
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class SettingsError(Exception):
    """A one-line complaint about ``[tool.mutation]`` or the run (printed; exit status 2)."""


@dataclass(frozen=True)
class Settings:
    """The validated ``[tool.mutation]`` table."""

    modules: list[str]
    tests: list[str]
    fail_under: float
    equivalent: dict[str, str] = field(default_factory=dict)  # site key -> why no test can kill it
    pytest_args: list[str] = field(default_factory=list)
    timeout_factor: float = 10.0
    timeout_floor: float = 10.0


def _strings(table: dict[str, Any], name: str) -> list[str]:
    value = table.get(name)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise SettingsError(f"[tool.mutation] {name} must be a non-empty list of paths, e.g. {name} = [\"a.py\"]")
    return value


def load(repo: Path) -> Settings:
    """Read and check ``[tool.mutation]`` of ``repo/pyproject.toml``; test globs are expanded."""
    try:
        data = tomllib.loads((repo / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"cannot read {repo / 'pyproject.toml'}: {exc}") from None
    table = data.get("tool", {}).get("mutation")
    if not isinstance(table, dict):
        raise SettingsError("pyproject.toml has no [tool.mutation] table; add modules = [...] and tests = [...]")
    modules = _strings(table, "modules")
    for m in modules:
        if not (repo / m).is_file() or not m.endswith(".py"):
            raise SettingsError(f"[tool.mutation] modules: {m} is not a Python file of this repository; fix the path")
    tests: list[str] = []
    for pattern in _strings(table, "tests"):
        found = sorted(str(Path(p).relative_to(repo)) for p in glob.glob(str(repo / pattern)))
        if not found and not any(ch in pattern for ch in "*?["):
            raise SettingsError(f"[tool.mutation] tests: {pattern} does not exist; fix the path or remove it")
        tests += [t for t in found if t not in tests]
    equivalent: dict[str, str] = {}
    for i, entry in enumerate(table.get("equivalent", [])):
        if not isinstance(entry, dict) or not isinstance(entry.get("mutant"), str) or not entry.get("reason"):
            raise SettingsError(f"[[tool.mutation.equivalent]] entry {i + 1} needs mutant = \"FILE::KEY\" and reason")
        equivalent[entry["mutant"]] = str(entry["reason"])
    try:
        fail_under = float(table.get("fail_under", 90))
    except (TypeError, ValueError):
        raise SettingsError("[tool.mutation] fail_under must be a percentage, e.g. fail_under = 90") from None
    args = table.get("pytest_args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise SettingsError("[tool.mutation] pytest_args must be a list of strings")
    return Settings(modules, tests, fail_under, equivalent, args)
