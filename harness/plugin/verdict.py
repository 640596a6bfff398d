"""The ``check`` fixture (verdicts asserted, recorded as Allure steps and in the history), the Allure
labels of each test from its ``@pytest.mark.rule`` IDs, and the results folder's shared files."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pytest

from harness.errors import ConfigError
from harness.plugin.options import ACTIVE_KEY, ENV_FRAGMENT, ENV_KEY, OPTIONS_KEY, VERDICTS_KEY, rule_ids_of

if TYPE_CHECKING:
    from harness.rules.verdict import Verdict


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Validate ``@pytest.mark.rule`` IDs and, with ``--alluredir``, label the test for Allure - before
    any fixture is set up, so a test whose topology fixture fails is still labelled."""
    ids = rule_ids_of(item)
    if not ids:
        return
    from harness.report.allure import (
        allure_active,
        apply_labels,
        apply_run_parameters,
        run_parameters,
        validate_rule_ids,
    )

    ids = validate_rule_ids(ids)
    if allure_active(item.config):
        apply_labels(ids)
        opts = item.config.stash.get(OPTIONS_KEY, None)
        if opts is not None:
            apply_run_parameters(run_parameters(opts.engine, opts.backend, opts.client))


class VerdictCheck:
    """The ``check`` fixture's callable: ``check(verdict_or_list) -> list[Verdict]``."""

    def __init__(self, item: pytest.Item) -> None:
        self._item = item
        self.verdicts: list[Verdict] = item.stash.setdefault(VERDICTS_KEY, [])

    def __call__(self, verdicts: Verdict | Iterable[Verdict]) -> list[Verdict]:
        """Record each verdict (an Allure step: passed / failed / broken) and in the per-test list,
        then assert them together: a violation raises RuleViolation (AssertionError, message starts
        with the rule ID), an unknown verdict raises VerdictUnknown (a harness error, never a pass)."""
        from harness.report.allure import allure_active, verdict_step
        from harness.rules.verdict import Verdict, assert_verdicts

        batch = [verdicts] if isinstance(verdicts, Verdict) else list(verdicts)
        for v in batch:
            if not isinstance(v, Verdict):
                raise ConfigError("check() takes Verdict objects (or a list of them), "
                                  f"not {type(v).__name__}")
        cited = rule_ids_of(self._item)
        for v in batch:
            if cited and v.rule_id not in cited:
                warnings.warn(f"{self._item.nodeid} checks {v.rule_id} but cites only {', '.join(cited)} "
                              f"in @pytest.mark.rule: add it so reports label the test", stacklevel=2)
        active = allure_active(self._item.config)
        self.verdicts.extend(batch)
        errors = [verdict_step(v, active) for v in batch]
        if any(e is not None for e in errors):
            assert_verdicts(batch)
        return batch


@pytest.fixture
def check(request: pytest.FixtureRequest) -> VerdictCheck:
    """``check(verdict_or_list)``: record verdicts as Allure steps and in this test's list (also saved
    in the history's meta), then assert them with :func:`harness.rules.assert_verdicts`."""
    return VerdictCheck(request.node)


# ------------------------------------------------------------------------------- session results


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With ``--alluredir``: write ``categories.json`` and ``environment.properties`` once, from the
    controller (xdist workers hand their run-time environment entries over as small files). A
    results folder that already holds another run's environment keeps it: a value that differs is
    listed beside it (two engines: ``engine=postgres, mariadb``)."""
    config = session.config
    opts = config.stash.get(OPTIONS_KEY, None)
    if opts is None or opts.alluredir is None or not config.stash.get(ACTIVE_KEY, False):
        return
    from harness.report.allure import allure_active, collect_environment, write_categories, write_environment

    if not allure_active(config):
        return
    extra = config.stash.get(ENV_KEY, {})
    if opts.worker != "main":  # xdist worker: leave our entries for the controller
        if extra:
            fragment = opts.alluredir / ENV_FRAGMENT.format(worker=opts.worker)
            fragment.parent.mkdir(parents=True, exist_ok=True)
            fragment.write_text(json.dumps(extra, default=str), encoding="utf-8")
        return
    merged: dict[str, Any] = {}
    for fragment in sorted(opts.alluredir.glob(ENV_FRAGMENT.format(worker="*"))):
        try:
            merged.update(json.loads(fragment.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            pass
        fragment.unlink(missing_ok=True)
    merged.update(extra)
    write_categories(opts.alluredir)
    write_environment(opts.alluredir, collect_environment(opts.backend, opts.engine, opts.client,
                                                          extra=merged), merge=True)


#: The ``check`` fixture's type, for annotations in suites (``from harness import Check``).
Check = VerdictCheck
