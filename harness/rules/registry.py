"""The checker registry: rule ID -> pure checker function, so a saved history can be re-checked
offline (``failover-harness check``) and suites can look checkers up by the IDs they cite.

A checker is ``checker(events: list[Event], **params) -> Verdict`` with no I/O. Its parameters come,
lowest priority first, from the checker's defaults, from the history's ``meta`` (by default
``meta["rule_params"][rule_id]``; a rule may register its own ``params_from_meta``), and from the
caller (``--param key=value`` on the command line).

Checker modules register themselves on import; the modules each profile lists in
:data:`harness.profiles.PROFILES` are imported the first time the registry is asked (a module that
cannot be imported is a ConfigError naming it).

**User rules.** A user registers a checker of their own rule ID with the :func:`rule` decorator
(in a ``conftest.py`` or any module it imports)::

    from harness.rules.registry import rule
    from harness.rules.verdict import Verdict

    @rule("ORDERS-1", title="Every order written once")
    def orders_written_once(events, *, max_duplicates: int = 0) -> Verdict: ...

``@pytest.mark.rule("ORDERS-1")`` is then accepted like a built-in ID and its verdicts are reported
alike. For offline re-checks (``failover-harness check --rules ORDERS-1``) the module is imported
from an entry point of group :data:`ENTRY_POINT_GROUP` (``failover_harness.rules``), from env
``FAILOVER_HARNESS_RULES`` (comma-separated module names) or with ``--plugin MODULE``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from harness import profiles
from harness.errors import ConfigError, UnknownRuleError
from harness.history.core import Event, History
from harness.rules.params import validate_params
from harness.rules.verdict import Verdict

Checker = Callable[..., Verdict]
ParamsFromMeta = Callable[[Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class RegisteredRule:
    """One registry entry: the rule ID, its checker and how to read its parameters from ``meta``."""

    rule_id: str
    checker: Checker
    params_from_meta: ParamsFromMeta

    @property
    def description(self) -> str:
        """First line of the checker's docstring."""
        doc = inspect.getdoc(self.checker) or ""
        return doc.splitlines()[0] if doc else ""

    def accepted_params(self) -> list[str] | None:
        """Names of the keyword parameters the checker takes (None if it takes ``**kwargs``)."""
        sig = inspect.signature(self.checker)
        params = list(sig.parameters.values())[1:]
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return None
        return [p.name for p in params
                if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]

    def check(self, events: Iterable[Event] | History, meta: Mapping[str, Any] | None = None,
              **params: Any) -> Verdict:
        """Run the checker on ``events`` with parameters merged from ``meta`` and ``params``."""
        if isinstance(events, History):
            meta = events.meta if meta is None else meta
            events = events.events()
        merged = dict(self.params_from_meta(meta or {}))
        merged.update(params)
        accepted = self.accepted_params()
        if accepted is not None:
            unknown = sorted(set(merged) - set(accepted))
            if unknown:
                raise ConfigError(
                    f"{self.rule_id}: unknown parameter(s) {', '.join(unknown)}; this checker takes "
                    f"{', '.join(accepted) or 'no parameters'}")
        verdict = self.checker(list(events), **validate_params(self.rule_id, self.checker, merged))
        if not isinstance(verdict, Verdict):
            raise TypeError(f"checker for {self.rule_id} returned {type(verdict).__name__}, not Verdict")
        return verdict


ENTRY_POINT_GROUP = "failover_harness.rules"
RULES_ENV = "FAILOVER_HARNESS_RULES"

_rules: dict[str, RegisteredRule] = {}
_titles: dict[str, str] = {}
_lock = threading.RLock()
_builtins_loaded = False


def rule_params_from_meta(rule_id: str) -> ParamsFromMeta:
    """The default ``params_from_meta``: ``meta["rule_params"][rule_id]`` (a dict), else nothing."""

    def params(meta: Mapping[str, Any]) -> dict[str, Any]:
        table = meta.get("rule_params") or {}
        value = table.get(rule_id) or {}
        return dict(value) if isinstance(value, Mapping) else {}

    return params


def _jsonable(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value, default=str))


def recording(checker: Checker) -> Checker:
    """Wrap a checker so that each verdict carries the parameters it was judged with
    (``details["params"]``): a saved history can then be re-checked offline exactly as the suite
    checked it (``failover-harness check``). Idempotent."""
    if getattr(checker, "__records_params__", False):
        return checker
    cached = getattr(checker, "__recording__", None)
    if cached is not None:
        return cached

    @functools.wraps(checker)
    def wrapper(events: Any, *args: Any, **params: Any) -> Verdict:
        verdict = checker(events, *args, **params)
        if isinstance(verdict, Verdict) and "params" not in verdict.details:
            verdict = dataclasses.replace(verdict, details={**verdict.details, "params": _jsonable(params)})
        return verdict

    wrapper.__records_params__ = True  # type: ignore[attr-defined]
    checker.__recording__ = wrapper  # type: ignore[attr-defined]
    return wrapper


def register(rule_id: str, checker: Checker, params_from_meta: ParamsFromMeta | None = None,
             *, replace: bool = False) -> RegisteredRule:
    """Register ``checker`` for ``rule_id`` (e.g. ``"DUR-1"``) and return the entry.

    ``params_from_meta(meta) -> dict`` reads the checker's parameters from a history's meta; the
    default reads ``meta["rule_params"][rule_id]``. Registering a different checker for an ID that
    already has one is a ConfigError unless ``replace=True``."""
    rule_id = rule_id.strip().upper()
    checker = recording(checker)
    entry = RegisteredRule(rule_id, checker, params_from_meta or rule_params_from_meta(rule_id))
    with _lock:
        existing = _rules.get(rule_id)
        if existing is not None and existing.checker is not checker and not replace:
            raise ConfigError(f"rule {rule_id} already has a checker ({existing.checker.__module__}."
                              f"{existing.checker.__qualname__}); pass replace=True to override it")
        _rules[rule_id] = entry
    return entry


def rule(rule_id: str, *, title: str | None = None, params_from_meta: ParamsFromMeta | None = None,
         replace: bool = False) -> Callable[[Checker], Checker]:
    """Decorator registering a checker for ``rule_id`` (``FAMILY-N``, e.g. ``MIR-7`` or a user's
    ``ORDERS-1``), with a short ``title`` for reports (default: the first line of its docstring):
    every built-in family registers its checkers with it too, so a checker is found both by its name
    and by its rule ID. Returns the recording checker (its verdicts carry the parameters they were
    judged with)."""
    norm = rule_id.strip().upper()
    family, dash, number = norm.partition("-")
    if not (dash and family.isalnum() and family[:1].isalpha() and number.isdigit()):
        raise ConfigError(f"user rule ID {rule_id!r} must look like FAMILY-N (letters/digits, a dash, a number), "
                          "e.g. ORDERS-1")

    def decorate(checker: Checker) -> Checker:
        entry = register(norm, checker, params_from_meta, replace=replace)
        with _lock:
            _titles[norm] = title or entry.description or norm
        return entry.checker

    return decorate


def family_checkers(family: str) -> dict[str, Checker]:
    """The checkers registered so far for the rule IDs of ``family`` (``"MIR"`` -> ``{"MIR-1": …}``),
    in RULEBOOK order. Unlike :func:`all_rules` it loads no module: a family package builds its
    ``CHECKERS`` table with it right after its checks module registered them with :func:`rule`."""
    prefix = family.strip().upper() + "-"
    with _lock:
        return {rid: _rules[rid].checker for rid in sorted(_rules, key=rule_sort_key) if rid.startswith(prefix)}


def title_of(rule_id: str) -> str | None:
    """The title a user rule was registered with (None for a rule registered without one)."""
    with _lock:
        return _titles.get(rule_id.strip().upper())


def is_registered(rule_id: str) -> bool:
    """True when a checker is registered for ``rule_id`` (built-in or user)."""
    _load_builtins()
    with _lock:
        return rule_id.strip().upper() in _rules


def load_user_rules(modules: Iterable[str] = ()) -> list[str]:
    """Import the user's rule modules: ``modules``, those in env ``FAILOVER_HARNESS_RULES`` and the
    entry points of group ``failover_harness.rules``. A module that cannot be imported is a
    ConfigError naming it. Returns the module names imported."""
    import importlib
    import importlib.metadata
    import os

    names = [m.strip() for m in modules if m.strip()]
    names += [m.strip() for m in os.environ.get(RULES_ENV, "").split(",") if m.strip()]
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        names.append(ep.value.partition(":")[0])
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ConfigError(f"user rule module {name!r} cannot be imported ({exc}); check --plugin, "
                              f"{RULES_ENV} or the {ENTRY_POINT_GROUP} entry point") from exc
    return names


def unregister(rule_id: str) -> None:
    """Remove a rule's checker (tests use this to clean up after registering a throw-away rule)."""
    with _lock:
        _rules.pop(rule_id.strip().upper(), None)
        _titles.pop(rule_id.strip().upper(), None)


def _load_builtins() -> None:
    global _builtins_loaded
    with _lock:
        if _builtins_loaded:
            return
        profiles.import_modules("checkers")
        _builtins_loaded = True
    load_user_rules()  # env FAILOVER_HARNESS_RULES and the failover_harness.rules entry points


def get(rule_id: str) -> RegisteredRule:
    """The registry entry of ``rule_id``; :class:`UnknownRuleError` (a ConfigError) lists the known
    IDs when there is none."""
    _load_builtins()
    key = rule_id.strip().upper()
    with _lock:
        entry = _rules.get(key)
        known = sorted(_rules, key=rule_sort_key)
    if entry is None:
        raise UnknownRuleError(f"no checker registered for rule {rule_id!r}; known rules: "
                               f"{', '.join(known) or 'none'}")
    return entry


def all_rules() -> list[str]:
    """The registered rule IDs in RULEBOOK order (family, then number)."""
    _load_builtins()
    with _lock:
        return sorted(_rules, key=rule_sort_key)


def check(rule_id: str, events: Iterable[Event] | History, meta: Mapping[str, Any] | None = None,
          **params: Any) -> Verdict:
    """Look up ``rule_id`` and run its checker (parameters from ``meta`` then ``params``)."""
    return get(rule_id).check(events, meta, **params)


def rule_sort_key(rule_id: str) -> tuple[str, int, str]:
    """Sort key ordering ``MIR-2`` before ``MIR-10``."""
    family, _, number = rule_id.partition("-")
    return (family, int(number) if number.isdigit() else 10**6, number)
