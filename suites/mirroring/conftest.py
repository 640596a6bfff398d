"""Fixtures of the mirroring suites: the client under test (``--client NAME``, default the
reference client), built by the plugin's ``client_factory`` and recording into the test's history.
Every client made here is shut down at teardown (nothing leaks)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness.history.core import History
from harness.workload.mirroring import CLIENT_ERRORS


@pytest.fixture
def make_client(client_factory: Callable[..., Any], history: History) -> Iterator[Callable[[str], Any]]:
    """``make_client(process)``: a new instance of the client under test recording into the test's
    history under ``process`` (a fresh instance has an empty failover-partner cache: a *first*
    connect, MIR-10). All instances are shut down after the test."""
    made: list[Any] = []

    def make(process: str) -> Any:
        client = client_factory(history=history, process=process)
        made.append(client)
        return client

    yield make
    for client in reversed(made):
        for name in ("shutdown", "close"):
            method = getattr(client, name, None)
            if callable(method):
                with contextlib.suppress(*CLIENT_ERRORS):
                    method()


@pytest.fixture
def client(make_client: Callable[[str], Any]) -> Any:
    """One instance of the client under test (process ``app``)."""
    return make_client("app")
