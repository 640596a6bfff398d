"""The MIR profile's workload (RULEBOOK MIR-1…13): what the mirroring suites drive the client under
test with, and how they record its outcomes.

* :func:`connstring` builds the SQL Server-style connection string the client under test gets:
  ``Server=`` / ``Failover Partner=`` are the nodes' **client-facing fault-proxy addresses** in
  ``ip,port`` form, so every attempt the client makes is observed at a fault proxy.
* :func:`partner` gives the names the checkers match a partner by: the node's fault-proxy name
  and its listen address ``host:port`` (the latter also matches the capture's ``conn.refused`` and
  the client's own ``attempt.*`` events, the traces of a refused connect); :func:`partners` the
  checkers' whole ``initial`` / ``failover`` / ``process`` block.
* :func:`try_open` / :class:`BackgroundOpen` / :func:`open_during` (in the background while scoped
  faults hold) open a connection with the client under test and turn
  whatever the *client* raises (its ``ConnectionOpenError``, a psycopg error, a refused connection
  string) into an outcome kept in the history (``client.outcome`` events) - a client that cannot
  do something is judged by a verdict, never reported as a harness error (OBS-1).
* :func:`hold_times` lists the attempts the fault proxy saw for one partner set (for the explicit
  MIR-5/MIR-6 table of the 15 s test).
* :func:`judge_with_stall_retry` runs a timing scenario under a :class:`StallMonitor`: a try that
  violates a ±20 ms timing rule while the shared machine demonstrably stalled (a 5 ms sleep woke
  more than 10 ms late, recorded as ``harness.stall``) is recorded and run again with a fresh
  client; the last try's verdicts are asserted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from harness.errors import ConnectionStringError, HarnessError, MirroringClientError
from harness.history.core import Event, History
from harness.rules.verdict import UNKNOWN

#: Exceptions a client under test may raise to the application from ``open``/``execute``: they are
#: outcomes of the scenario, judged by the checkers. Everything else propagates (harness error).
CLIENT_ERRORS: tuple[type[BaseException], ...] = (MirroringClientError, psycopg.Error)

APP_DATABASE = "app"


def client_address(topology: Any, node: str) -> tuple[str, int]:
    """The client-facing (fault-proxy) address of ``node``."""
    host, port = topology.node(node).client_address
    return str(host), int(port)


def partner(topology: Any, node: str) -> list[str]:
    """Checker names of ``node`` as a partner: its fault-proxy name and listen ``host:port``."""
    host, port = client_address(topology, node)
    return [topology.links.client_proxy(node), f"{host}:{port}"]


def partners(topology: Any, initial: str, failover: str, process: Any = None) -> dict[str, Any]:
    """The checkers' keyword block for ``Server=initial; Failover Partner=failover`` (MIR-1 … MIR-13):
    ``initial`` / ``failover`` names (:func:`partner`) and, when given, the client ``process``."""
    block: dict[str, Any] = {"initial": partner(topology, initial), "failover": partner(topology, failover)}
    if process is not None:
        block["process"] = process
    return block


def server_value(topology: Any, node: str) -> str:
    """``ip,port`` of the node's client-facing address, as written in ``Server=``."""
    host, port = client_address(topology, node)
    return f"{host},{port}"


def connstring(topology: Any, initial: str, failover: str | None = None, *,
               login_timeout: float | str | None = 1.0, database: str | None = APP_DATABASE) -> str:
    """``Server=<initial>; Failover Partner=<failover>; Database=…; Connect Timeout=…; User ID;
    Password`` over the client-facing proxy addresses. ``login_timeout=None`` writes
    ``Connect Timeout=0`` (no timeout, MIR-8); ``"default"`` leaves it out (the documented 15 s);
    ``database=None`` leaves ``Database`` out (MIR-2)."""
    parts = [f"Server={server_value(topology, initial)}"]
    if failover is not None:
        parts.append(f"Failover Partner={server_value(topology, failover)}")
    if database is not None:
        parts.append(f"Database={database}")
    if login_timeout != "default":
        parts.append(f"Connect Timeout={0 if login_timeout is None else f'{float(login_timeout):g}'}")
    creds = topology.engine.credentials  # the engine's test login (a random password, never printed)
    password = creds.password.replace('"', '""')
    parts += [f"User ID={creds.user}", f'Password="{password}"']
    return "; ".join(parts)


def client_variant(client: Any) -> str:
    """The MIR-9 variant the client declares (``variant`` attribute: ``native`` / ``managed``).
    **(interpretation)** A client that declares none is judged as ``native`` - the variant whose
    cache follows every role change (a client without any cache breaks both)."""
    variant = getattr(client, "variant", None)
    return variant if variant in ("native", "managed") else "native"


@dataclass
class OpenResult:
    """What one ``open`` gave the application: a connection, or the client's error."""

    conn: Any = None
    error: BaseException | None = None
    seconds: float = 0.0
    pending: bool = False  # the open had not returned when the test stopped waiting

    @property
    def ok(self) -> bool:
        return self.conn is not None

    def close(self) -> None:
        """Close the connection (errors of a broken connection are the client's business)."""
        if self.conn is not None:
            try:
                self.conn.close()
            except CLIENT_ERRORS:
                pass


def _record_outcome(history: History, process: Any, result: OpenResult, label: str) -> None:
    error = None if result.error is None else f"{type(result.error).__name__}: {str(result.error)[:300]}"
    history.record("client.outcome", process=process, f="open", label=label, ok=result.ok, error=error,
                   pending=result.pending, seconds=round(result.seconds, 6),
                   reason=getattr(result.error, "reason", None))


def try_open(client: Any, text: str, history: History, *, label: str = "",
             accept: tuple[type[BaseException], ...] = CLIENT_ERRORS) -> OpenResult:
    """``client.open(text)``; a client error (``accept``) is returned as the outcome and recorded as
    a ``client.outcome`` event. Harness errors propagate."""
    t0 = time.monotonic()
    try:
        conn = client.open(text)
        result = OpenResult(conn=conn, seconds=time.monotonic() - t0)
    except accept as exc:
        if isinstance(exc, HarnessError) and not isinstance(exc, ConnectionStringError):
            raise
        result = OpenResult(error=exc, seconds=time.monotonic() - t0)
    _record_outcome(history, getattr(client, "process", None), result, label)
    return result


class BackgroundOpen:
    """``client.open(text)`` on a thread, so the test can fault, observe, ``abort()`` or give up
    waiting (a client that cannot be aborted is then unblocked by healing the fault)."""

    def __init__(self, client: Any, text: str, history: History, *, label: str = "") -> None:
        self.client, self.text, self.history, self.label = client, text, history, label
        self.result: OpenResult | None = None
        self._harness_error: BaseException | None = None
        self.started_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"open-{label or 'bg'}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        t0 = time.monotonic()
        try:
            conn = self.client.open(self.text)
            self.result = OpenResult(conn=conn, seconds=time.monotonic() - t0)
        except CLIENT_ERRORS as exc:
            self.result = OpenResult(error=exc, seconds=time.monotonic() - t0)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread by wait()
            self._harness_error = exc
            return
        _record_outcome(self.history, getattr(self.client, "process", None), self.result, self.label)

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, timeout: float) -> OpenResult:
        """Wait up to ``timeout`` s; a still pending open gives ``OpenResult(pending=True)``."""
        self._thread.join(max(0.0, timeout))
        if self._harness_error is not None:
            raise self._harness_error
        if self.result is None:
            pending = OpenResult(pending=True, seconds=time.monotonic() - self.started_at)
            return pending
        return self.result

    def finish(self, timeout: float = 10.0) -> OpenResult:
        """Wait for the end; if the client is still blocked after ``timeout`` the outcome is recorded
        as pending (the client never returned - judged from the proxies' view)."""
        result = self.wait(timeout)
        if result.pending:
            _record_outcome(self.history, getattr(self.client, "process", None), result, self.label)
        return result


def open_during(client: Any, text: str, history: History, faults: Sequence[Any] = (), *, wait: float,
                label: str = "") -> OpenResult:
    """Open in the background while the scoped ``faults`` hold (entered in order, undone after
    ``wait`` seconds even if the open is still pending - a client with no working login timeout is
    then unblocked), then wait for its end (:meth:`BackgroundOpen.finish`)."""
    with contextlib.ExitStack() as stack:
        for fault in faults:
            stack.enter_context(fault)
        bg = BackgroundOpen(client, text, history, label=label)
        bg.wait(wait)
    return bg.finish(10.0)


def wait_until(predicate: Any, timeout: float, interval: float = 0.005) -> bool:
    """Poll ``predicate()`` until it is true or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def accepted_after(history: History, names: Sequence[str], t: float) -> list[Event]:
    """``conn.accepted`` events at the proxies of ``names`` (proxy names) after monotonic ``t``."""
    return [e for e in history.events("conn.accepted") if e.get("proxy") in names and e.t >= t]


@dataclass(frozen=True)
class Held:
    """One attempt as the fault proxy saw it."""

    proxy: str
    accepted: Event
    closed: Event | None

    @property
    def seconds(self) -> float | None:
        return None if self.closed is None else self.closed.t - self.accepted.t


def hold_times(history: History, proxies: Sequence[str], since: float) -> list[Held]:
    """Every proxied connection to ``proxies`` accepted after ``since``, in accept order."""
    closed = {(e.get("proxy"), e.get("conn_id")): e for e in history.events("conn.closed")}
    out = [Held(e.get("proxy"), e, closed.get((e.get("proxy"), e.get("conn_id"))))
           for e in history.events("conn.accepted") if e.get("proxy") in proxies and e.t >= since]
    return sorted(out, key=lambda h: h.accepted.t)


# ------------------------------------------------------------------ machine stalls and timing retries

#: Rules whose verdicts rest on ±tolerance timing (a scheduler stall of the shared 2-core machine can
#: push an exact client past them once; a client with wrong timing fails every try).
TIMING_RULES = frozenset({"MIR-3", "MIR-5", "MIR-6", "MIR-7", "MIR-13"})


class StallMonitor:
    """A thread that sleeps ``interval`` s in a loop and records every wake-up later than
    ``threshold`` s as a ``harness.stall`` event (``seconds`` = how late): evidence that the machine,
    not the client, was slow while a timing scenario ran. On leaving it also counts the
    ``harness.stall`` events others recorded meanwhile with a ``source`` (the fault proxy's log lag,
    :meth:`harness.toxiproxy.logpipe.LogEventPipe.start_probe`): late stamps of the proxy's events are
    the same kind of evidence."""

    def __init__(self, history: History, threshold: float = 0.010, interval: float = 0.005) -> None:
        self.history, self.threshold, self.interval = history, threshold, interval
        self._t0 = time.monotonic()
        self.stalls: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stall-monitor", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            time.sleep(self.interval)
            late = time.monotonic() - t0 - self.interval
            if late > self.threshold:
                self.stalls.append(late)
                self.history.record("harness.stall", t=t0 + self.interval, seconds=round(late, 6))

    def __enter__(self) -> StallMonitor:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2.0)
        # the fault proxy's own lag, where its events come from a log (the compose backend's probe)
        self.stalls += [float(e.get("seconds") or 0) for e in self.history.events("harness.stall")
                        if e.get("source") and e.t >= self._t0]


def judge_with_stall_retry(history: History, scenario: Any, tries: int = 3, threshold: float = 0.010,
                           unobservable: float = 0.050) -> list[Any]:
    """Run ``scenario(k)`` (k = 1, 2, …; it must use a fresh client process per try and return the
    verdicts of that try only) under a :class:`StallMonitor` (``threshold``: how late a wake-up must
    be to count as a stall). When a try violates a timing rule (:data:`TIMING_RULES`) *and* the
    machine stalled during it, that violation may be the machine's: the try is recorded
    (``harness.retry`` event, ``meta["timing_retries"]``) and the scenario runs again, at most
    ``tries`` times. The last try's verdicts are returned for ``check`` - so a client with wrong
    timing still fails, and no violation is dropped without a recorded machine stall. A timing
    verdict that is *unknown* because some of its intervals were off by no more than the time the
    harness lost then (the checkers' ``details["not_judged"]``, MIR-5/MIR-7) is run again the same way.

    One exception (OBS-1, "unknown when not observable"): when *every* try violated a timing rule
    and stalled by at least ``unobservable`` s (above the ±0.050 s the timing checkers accept at
    most as a tolerance: the machine, or the fault proxy's log, was late by more than any
    tolerance, every time), the timing rules' violations of the last try are returned as
    *unknown*, saying why; the other verdicts are kept as they are."""
    verdicts: list[Any] = []
    worst: list[float] = []
    for k in range(1, tries + 1):
        with StallMonitor(history, threshold=threshold) as monitor:
            verdicts = list(scenario(k))
        violated = [v for v in verdicts if v.valid is False]
        # a timing verdict left unknown because some of its intervals lay within the time the
        # harness lost (details["not_judged"]) deserves another try just as much
        blurred = [v for v in verdicts if v.valid == UNKNOWN and v.rule_id in TIMING_RULES
                   and v.details.get("not_judged")]
        timing = [v for v in violated if v.rule_id in TIMING_RULES] + blurred
        if not monitor.stalls or not timing:
            return verdicts
        worst.append(max(monitor.stalls))
        if k == tries:
            break
        note = {"try": k, "stalls": len(monitor.stalls), "worst_stall": round(max(monitor.stalls), 6),
                "violations": [v.summary[:300] for v in (violated or blurred)]}
        history.meta.setdefault("timing_retries", []).append(note)
        history.record("harness.retry", **note)
    if len(worst) == tries and min(worst) >= unobservable:
        why = (f"not observable: in each of {tries} tries the machine or the fault proxy's log stalled by "
               f"{min(worst):.3f} s or more (worst {max(worst):.3f} s), beyond any timing tolerance")
        history.record("harness.unobservable", tries=tries, worst_stalls=[round(w, 6) for w in worst])
        verdicts = [dataclasses.replace(v, valid=UNKNOWN, observed=f"{why}; last try: {v.observed}"[:600])
                    if v.valid is False and v.rule_id in TIMING_RULES else v for v in verdicts]
    return verdicts
