"""One pytest session for the whole run: it collects the checker tests once, runs them unmutated
while recording which test reaches which line of the mutated modules (the *baseline*), then hands
its collected items to the mutant runner, so a mutant costs a fork and its tests - not a new
pytest start.

A mutant is later run against only the tests that reached its lines (or, failing that, called its
function). A function that ran while a module was being imported (``mir_check`` building the
checkers, module constants, defaults) cannot be patched in place, so its mutants re-import instead.
"""

from __future__ import annotations

import sys
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from _pytest.runner import runtestprotocol

from scripts.mutation.sites import FuncKey

LineKey = tuple[str, int]  # (file, line)


@dataclass
class Baseline:
    """What the unmutated run saw: the tests in order, per line and per function the tests that
    reached it, the functions called while a module was importing, each test's duration."""

    tests: list[str] = field(default_factory=list)
    items: dict[str, Any] = field(default_factory=dict)  # node id -> pytest item
    lines: dict[LineKey, set[str]] = field(default_factory=lambda: defaultdict(set))
    callers: dict[FuncKey, set[str]] = field(default_factory=lambda: defaultdict(set))
    at_import: set[FuncKey] = field(default_factory=set)
    durations: dict[str, float] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    files: set[str] = field(default_factory=set)  # target files some test reached

    def tests_for(self, file: str, first: int, last: int, func: FuncKey) -> list[str]:
        """The tests that ran a line of ``first..last`` of ``file``, else those that called ``func``;
        fastest first."""
        found: set[str] = set()
        for line in range(first, last + 1):
            found |= self.lines.get((file, line), set())
        if not found:
            found = self.callers.get(func, set())
        order = {n: i for i, n in enumerate(self.tests)}
        return sorted(found, key=lambda n: (self.durations.get(n, 0.0), order.get(n, 0)))


class _Tracer:
    """``sys.settrace`` hook: lines of code in ``files`` are attributed to the running test; calls
    made while any ``<module>`` code is on the stack (or outside a test) count as import time."""

    def __init__(self, files: set[str], out: Baseline) -> None:
        self.files = files
        self.out = out
        self.current: str | None = None
        self.importing = 0

    def _module_frame(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "return":
            self.importing -= 1
        return self._module_frame

    def _target_frame(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and self.current is not None and not self.importing:
            self.out.lines[(frame.f_code.co_filename, frame.f_lineno)].add(self.current)
        return self._target_frame

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        if code.co_name == "<module>":
            self.importing += 1
            return self._module_frame
        if code.co_filename not in self.files:
            return None
        self.out.files.add(code.co_filename)
        key = (code.co_qualname, code.co_firstlineno)
        if self.importing or self.current is None:
            self.out.at_import.add(key)
            return None
        self.out.callers[key].add(self.current)
        return self._target_frame


class Driver:
    """The pytest plugin that runs the baseline and then ``after(baseline)`` inside the session."""

    def __init__(self, files: set[str], after: Callable[[Baseline], int]) -> None:
        self.base = Baseline()
        self.tracer = _Tracer(files, self.base)
        self.after = after
        self.status = 0

    def pytest_configure(self, config: Any) -> None:
        sys.settrace(self.tracer)  # from here on, imports of the tests and harness are seen
        threading.settrace(self.tracer)

    def pytest_runtest_logreport(self, report: Any) -> None:
        self.base.durations[report.nodeid] = self.base.durations.get(report.nodeid, 0.0) + report.duration
        if report.failed and report.nodeid not in self.base.failed:
            self.base.failed.append(report.nodeid)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: Any) -> bool:
        items = session.items
        for i, item in enumerate(items):
            self.tracer.current = item.nodeid
            self.base.tests.append(item.nodeid)
            self.base.items[item.nodeid] = item
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=items[i + 1] if i + 1 < len(items) else None)
            self.tracer.current = None
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
        if not self.base.failed and items:
            self.status = self.after(self.base)
        return True


def run_items(items: list[Any]) -> int:
    """Run ``items`` in this (forked) process, quietly; 1 at the first failure, else 0 (a child's
    pytest ``-x``)."""
    for i, item in enumerate(items):
        reports = runtestprotocol(item, nextitem=items[i + 1] if i + 1 < len(items) else None, log=False)
        if any(r.failed for r in reports):
            return 1
    return 0


def run_session(files: set[str], test_files: list[str], pytest_args: list[str],
                after: Callable[[Baseline], int]) -> tuple[int, Driver]:
    """Collect and run ``test_files`` once with the :class:`Driver`; its ``after`` does the rest."""
    driver = Driver(files, after)
    code = int(pytest.main([*pytest_args, *test_files], plugins=[driver]))
    return code, driver
