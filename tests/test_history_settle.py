"""History settlers (OBS-1): an outside observer that delivers its events late (a real Toxiproxy's
log, the packet capture) registers a settler, and every snapshot waits for it first."""

from __future__ import annotations

import threading
import time

from harness.history.core import History


def test_a_late_observation_is_in_the_snapshot_taken_after_it_was_made() -> None:
    history = History()
    observed = threading.Event()
    delivered = threading.Event()

    def observer() -> None:  # sees a close now, delivers it 0.3 s later (a slow derivation)
        observed.set()
        time.sleep(0.3)
        history.record("conn.closed", conn_id=1)
        delivered.set()

    history.add_settler(lambda: delivered.wait(5))
    threading.Thread(target=observer).start()
    assert observed.wait(5)
    assert [e.type for e in history.events()] == ["conn.closed"]


def test_a_settler_that_reads_the_history_is_not_called_from_inside_itself() -> None:
    history = History()
    calls: list[int] = []

    def settler() -> None:
        calls.append(len(history.events()))

    history.add_settler(settler)
    history.record("op.ok")
    assert len(history.events()) == 1
    assert calls == [1]


def test_a_removed_settler_is_no_longer_called() -> None:
    history = History()
    calls: list[str] = []
    remove = history.add_settler(lambda: calls.append("settled"))
    history.events("conn.")
    remove()
    remove()  # twice is harmless
    history.events()
    assert calls == ["settled"]
