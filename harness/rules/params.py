"""Checker parameters checked against the checker's own annotations before it runs.

A parameter reaches a checker from a history's meta or from ``--param KEY=VALUE``; either may hold
anything JSON can (``login_timeout="abc"``, ``min_keep_rate=NaN``, ``initial=5``). Each value is
validated (pydantic, strict, finite numbers only) against the type the checker's signature declares
(:func:`typing.get_type_hints`), so a wrong one is a :class:`~harness.errors.ConfigError` naming the
rule, the parameter, the type it needs and an example - never a ``TypeError`` from deep inside the
checker (a harness error, OBS-1). Parameters annotated ``Any`` are passed as they are.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError

from harness.errors import ConfigError

_CONFIG = ConfigDict(strict=True, allow_inf_nan=False, arbitrary_types_allowed=True)
_KINDS = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@functools.cache
def _adapters(checker: Callable[..., Any]) -> dict[str, tuple[TypeAdapter[Any], str, Any]]:
    """name -> (validator, readable type, default) for each annotated keyword parameter."""
    target = inspect.unwrap(checker)
    hints = typing.get_type_hints(target, include_extras=True)
    out: dict[str, tuple[TypeAdapter[Any], str, Any]] = {}
    for name, param in list(inspect.signature(target).parameters.items())[1:]:
        hint = hints.get(name, Any)
        if param.kind in _KINDS and hint is not Any:
            out[name] = (TypeAdapter(hint, config=_CONFIG), type_text(hint), param.default)
    return out


def type_text(hint: Any) -> str:
    """A readable form of an annotation: ``float | None``, ``Sequence[float]``, ``str``."""
    text = hint.__name__ if isinstance(hint, type) else repr(hint)
    return re.sub(r"\b(typing|collections\.abc|builtins)\.", "", text).replace("NoneType", "None")


def _example(name: str, text: str, default: Any) -> str:
    if default not in (None, inspect.Parameter.empty) and not isinstance(default, str):
        return f"{name}={json.dumps(list(default) if isinstance(default, tuple) else default, separators=(',', ':'))}"
    if "float" in text:
        return f"{name}=15"
    if "Sequence[str]" in text or "list[str]" in text:
        return f'{name}=\'["A","B"]\''
    return f"{name}={default}" if isinstance(default, str) and default else f"{name}=TEXT"


def _shown(value: Any) -> str:
    text = json.dumps(value, default=repr) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def validate_params(rule_id: str, checker: Callable[..., Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` checked against ``checker``'s annotated parameter types (OBS-1: bad input is a
    ConfigError, not a checker crash); returns them as the checker gets them."""
    adapters = _adapters(checker)
    checked: dict[str, Any] = {}
    for name, value in params.items():
        if name not in adapters:
            checked[name] = value
            continue
        adapter, text, default = adapters[name]
        try:
            checked[name] = adapter.validate_python(value)
        except ValidationError as exc:
            reason = exc.errors()[0]["msg"]
            raise ConfigError(f"{rule_id}: parameter {name}={_shown(value)} is wrong ({reason}); it takes "
                              f"{text}, e.g. {_example(name, text, default)}") from None
    return checked


def annotated_params(checker: Callable[..., Any]) -> dict[str, str]:
    """The checker's validated parameters and their readable types (for help texts and tests)."""
    return {name: text for name, (_, text, _) in _adapters(checker).items()}
