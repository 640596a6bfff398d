"""The checker registry and the verdict -> assertion mapping (OBS-1)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.errors import ConfigError, HarnessError, ProxyError, RuleViolation
from harness.history import Event, History
from harness.rules import UNKNOWN, Verdict, assert_verdict, assert_verdicts, registry
from harness.rules.verdict import VerdictUnknown


def _count_checker(events: list[Event], *, minimum: int = 1, kind: str = "op.ok") -> Verdict:
    """TST-1: at least ``minimum`` events of ``kind``."""
    n = sum(1 for e in events if e.type == kind)
    return Verdict("TST-1", n >= minimum, f">= {minimum} {kind}", f"{n}")


@pytest.fixture
def tst1() -> Iterator[registry.RegisteredRule]:
    entry = registry.register("TST-1", _count_checker)
    yield entry
    registry.unregister("TST-1")


def test_dur1_is_registered_and_listed() -> None:
    assert "DUR-1" in registry.all_rules()
    assert registry.get("dur-1").rule_id == "DUR-1"  # case-insensitive lookup
    assert registry.get("DUR-1").description.startswith("DUR-1")


def test_unknown_rule_lists_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"no checker registered for rule 'XYZ-9'; known rules: .*DUR-1"):
        registry.get("XYZ-9")


def test_params_from_meta_then_explicit(tst1: registry.RegisteredRule) -> None:
    h = History(meta={"rule_params": {"TST-1": {"minimum": 2}}})
    h.record("op.ok")
    assert registry.check("TST-1", h).valid is False  # minimum 2 from meta
    assert registry.check("TST-1", h, minimum=1).valid is True  # explicit wins
    assert registry.check("TST-1", h.events(), {}).valid is True  # default minimum 1


def test_unknown_parameter_names_accepted_ones(tst1: registry.RegisteredRule) -> None:
    with pytest.raises(ConfigError, match="unknown parameter.*bogus.*takes minimum, kind"):
        registry.check("TST-1", [], bogus=1)


def test_custom_params_from_meta(tst1: registry.RegisteredRule) -> None:
    registry.register("TST-1", _count_checker, params_from_meta=lambda m: {"kind": m["kind"]}, replace=True)
    h = History(meta={"kind": "x"})
    h.record("x")
    assert registry.check("TST-1", h).valid is True


def test_second_checker_for_same_id_needs_replace(tst1: registry.RegisteredRule) -> None:
    with pytest.raises(ConfigError, match="already has a checker"):
        registry.register("TST-1", lambda events: Verdict("TST-1", True))
    registry.register("TST-1", _count_checker)  # same function again is fine


def test_rule_sort_key_orders_numbers_numerically() -> None:
    assert sorted(["MIR-10", "MIR-2", "DUR-1"], key=registry.rule_sort_key) == ["DUR-1", "MIR-2", "MIR-10"]


def test_false_becomes_assertion_error_starting_with_rule_id() -> None:
    v = Verdict("MIR-5", False, expected="retry 1.2 s", observed="retry 3.0 s", evidence=[4, 7])
    with pytest.raises(AssertionError) as exc:
        assert_verdict(v)
    assert isinstance(exc.value, RuleViolation)
    assert str(exc.value).startswith("MIR-5: expected retry 1.2 s; observed retry 3.0 s")
    assert "events 4, 7" in str(exc.value)


def test_unknown_is_not_a_pass_and_not_an_assertion() -> None:
    v = Verdict("MIR-4", UNKNOWN, observed="no attempts recorded")
    with pytest.raises(VerdictUnknown) as exc:
        assert_verdict(v)
    assert isinstance(exc.value, HarnessError) and not isinstance(exc.value, AssertionError)
    assert str(exc.value).startswith("MIR-4: verdict unknown")


def test_harness_errors_are_distinct_from_assertions() -> None:
    assert not issubclass(HarnessError, AssertionError)
    assert not issubclass(ProxyError, AssertionError)
    assert issubclass(RuleViolation, AssertionError) and not issubclass(RuleViolation, HarnessError)


def test_kept_passes_through_and_several_violations_are_reported_together() -> None:
    kept = Verdict("MIR-1", True)
    assert assert_verdict(kept) is kept
    with pytest.raises(RuleViolation) as exc:
        assert_verdicts([kept, Verdict("MIR-4", False, "a", "b"), Verdict("MIR-5", False, "c", "d"),
                         Verdict("MIR-6", UNKNOWN)])
    text = str(exc.value)
    assert text.startswith("MIR-4: ") and "MIR-5: expected c; observed d" in text


def test_invalid_validity_is_rejected() -> None:
    with pytest.raises(ValueError):
        Verdict("MIR-1", "maybe")  # type: ignore[arg-type]
