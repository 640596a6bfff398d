"""The schema of a saved history's header line and its ``meta`` (pydantic), checked when a history is
read, so that a hand-edited or foreign file is refused in one line naming the field - never a
``TypeError`` later in a checker, the timeline or the matrix (bad input is a ConfigError, OBS-1).

Only the fields the harness itself reads are typed; any other key of ``meta`` is kept as it is (suites
may add their own). Numbers must be finite.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import ConfigError

_OPEN = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class VerdictDetails(BaseModel):
    """A verdict's ``details``: free-form, but ``params`` is the parameter table it was judged with."""

    model_config = _OPEN
    params: dict[str, Any] | None = None


class VerdictRecord(BaseModel):
    """One verdict as the plugin saves it in ``meta["verdicts"]`` (``Verdict.to_dict``)."""

    model_config = _OPEN
    rule_id: str = Field(min_length=1)
    valid: bool | Literal["unknown"] | None = None  # Verdict.valid: True, False or "unknown"
    status: str | None = None
    expected: str | None = None
    observed: str | None = None
    evidence: list[Any] = []
    details: VerdictDetails = VerdictDetails()


class Meta(BaseModel):
    """The ``meta`` object of a history (what the plugin and the topology write there)."""

    model_config = _OPEN
    test: str | None = None
    rules: list[str] = []
    backend: str | None = None
    engine: str | None = None
    client: str | None = None
    worker: str | None = None
    outcome: str | None = None
    monotonic_origin: float | None = None
    wall_origin: float | None = None
    topology: dict[str, Any] | None = None
    client_under_test: dict[str, Any] | None = None
    rule_params: dict[str, dict[str, Any]] = {}
    verdicts: list[VerdictRecord] = []


class Header(BaseModel):
    """The first line of a history file: ``{"format", "version", "meta"}``."""

    model_config = ConfigDict(extra="allow", strict=True)
    format: Literal["failover-harness-history"] = "failover-harness-history"
    version: int = Field(default=1, ge=1)
    meta: Meta | None = None


def _where(loc: tuple[int | str, ...]) -> str:
    return ".".join(f"[{part}]" if isinstance(part, int) else str(part) for part in loc).replace(".[", "[")


def validate_header(path: str | os.PathLike[str], head: Any) -> None:
    """Check a history's parsed header line against :class:`Header` (OBS-1: a file that is not a
    harness history is a ConfigError naming the field, the problem and the fix)."""
    try:
        Header.model_validate(head)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = _where(tuple(error["loc"])) or "header"
        shown = repr(error.get("input"))
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise ConfigError(f"{path}:1: header field {field} = {shown} is wrong ({error['msg']}); this is not a "
                          f"history this harness wrote - re-save it (History.save) or fix that field") from None


def check_history_path(path: str | os.PathLike[str]) -> None:
    """A history path must name a readable file, not a folder (OBS-1: one line, never a traceback)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path} is a folder; give one history file, e.g. "
                          f"{path / 'NAME.jsonl'} (histories are saved under reports/histories/)")
    if path.exists() and not os.access(path, os.R_OK):
        raise ConfigError(f"history file {path} is not readable by this user; fix its permissions")
