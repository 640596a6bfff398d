"""A failed or crashed ``up`` leaves nothing behind (docs/topology.md, "Bringing a topology up"):
a bad harness home is one line before anything starts; a failure injected at each step of ``up``
stops every process, port and shared-memory segment it had made; a SIGKILLed ``up`` is cleaned by its
reaper, and ``down --all`` finds what a crashed ``up`` and its reaper left, the fault proxy included.

Real parts throughout: real PostgreSQL servers, the embedded fault proxy as its background process,
real tmpfs and read-only mounts (root)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.errors import ConfigError, TopologyError
from harness.topology import local, preflight
from harness.topology.local import LocalPair, LocalTopology
from harness.topology.proxied import ProxiedLinks

FH = [sys.executable, "-m", "harness.cli"]


# ------------------------------------------------------------------------------------------ helpers
def _mentions(pid: int, home: str) -> bool:
    """Whether process ``pid`` belongs to the harness home ``home`` (its command line names it, or it
    inherited ``FAILOVER_HARNESS_HOME=home``)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        env = Path(f"/proc/{pid}/environ").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    if stat[stat.rfind(b")") + 2:][:1] == b"Z":  # a zombie holds nothing
        return False
    return home.encode() in cmd or f"FAILOVER_HARNESS_HOME={home}".encode() in env.split(b"\0")


def harness_processes(home: str) -> list[str]:
    """Live processes of the harness home ``home`` (this test process excluded)."""
    me = os.getpid()
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != me and _mentions(int(entry.name), home):
            cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            out.append(f"{entry.name} {cmd[:160]}")
    return out


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def shm_created_by(pids: set[int]) -> list[str]:
    """System V shared-memory segments whose creator is one of ``pids`` (/proc/sysvipc/shm cpid)."""
    rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return [r for r in rows if len(r.split()) > 4 and int(r.split()[4]) in pids]


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` seconds passed; its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh harness home for this test (the machine's template cache shared) in this process's
    environment; afterwards every process of it is checked gone (and killed if not, failing)."""
    from harness.paths import templates_dir

    templates = str(templates_dir())
    path = tempfile.mkdtemp(prefix="fh-up-", dir="/tmp")
    os.chmod(path, 0o755)
    monkeypatch.setenv("FAILOVER_HARNESS_HOME", path)
    monkeypatch.setenv("FAILOVER_HARNESS_TEMPLATES", templates)
    monkeypatch.setenv("FAILOVER_HARNESS_REPORTS", str(Path(path) / "reports"))
    yield path
    left = harness_processes(path)
    for line in left:
        os.kill(int(line.split()[0]), signal.SIGKILL)
    subprocess.run(["rm", "-rf", path], check=False)
    assert not left, f"processes left behind: {left}"


# --------------------------------------------------------------------- a bad home: one line, nothing
@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mount a 5 MB tmpfs with the given extra options (``""`` or ``"ro"``); unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (make test runs as root)")
    mounts: list[Path] = []

    def mount(options: str) -> Path:
        target = tmp_path / f"mnt{len(mounts)}"
        target.mkdir()
        opts = ",".join(o for o in ("size=5m", options) if o)
        subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(target)], check=True)
        mounts.append(target)
        return target

    yield mount
    for target in mounts:
        subprocess.run(["umount", "-l", str(target)], check=False)


@pytest.mark.parametrize("kind", ["small-tmpfs", "read-only", "regular-file"])
def test_up_on_a_bad_home_fails_in_one_line_and_leaves_nothing(kind: str, mounted, tmp_path: Path) -> None:
    if kind == "small-tmpfs":
        bad = mounted("")
        expected = "MB free, needs ~"
    elif kind == "read-only":
        bad = mounted("ro")
        expected = "read-only file system"
    else:
        bad = tmp_path / "home-file"
        bad.write_text("not a folder\n")
        expected = "it is a file, not a folder"
    env = dict(os.environ, FAILOVER_HARNESS_HOME=str(bad), FAILOVER_HARNESS_REPORTS=str(tmp_path / "reports"))
    env.pop("FAILOVER_HARNESS_TEMPLATES", None)
    res = subprocess.run([*FH, "up", "--detach"], env=env, capture_output=True, text=True, timeout=60)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and expected in lines[0] and str(bad) in lines[0], res.stderr
    assert "FAILOVER_HARNESS_HOME" in lines[0] and "internal error" not in lines[0]
    assert wait_for(lambda: not harness_processes(str(bad)), 3), harness_processes(str(bad))


def test_a_reports_folder_that_is_a_file_is_one_line(tmp_path: Path, home: str) -> None:
    reports = tmp_path / "reports-file"
    reports.write_text("x")
    env = dict(os.environ, FAILOVER_HARNESS_REPORTS=str(reports))
    res = subprocess.run([*FH, "up", "--detach"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "FAILOVER_HARNESS_REPORTS" in res.stderr and str(reports) in res.stderr
    assert not list(Path(home, "runs").glob("*")) if Path(home, "runs").exists() else True


def test_the_space_check_counts_what_the_nodes_need(tmp_path: Path) -> None:
    assert preflight.needed_mb("postgres", 2, True) < preflight.needed_mb("postgres", 2, False)
    assert preflight.needed_mb("postgres", 3, True) > preflight.needed_mb("postgres", 2, True)
    with pytest.raises(ConfigError, match=r"has \d+ MB free, needs ~\d+ MB"):
        preflight.check_space(tmp_path, preflight.free_mb(tmp_path) + 1000)
    err = OSError(28, "No space left on device")
    assert preflight.is_no_space(TopologyError("copy failed")) is False
    try:
        try:
            raise err
        except OSError as exc:
            raise TopologyError("copying failed") from exc
    except TopologyError as wrapped:
        assert preflight.is_no_space(wrapped)


# ------------------------------------------------------------- a failure injected at each step of up
class Injected(TopologyError):
    """The failure a test injects into one step of ``up``."""


def _after(real: Callable[..., Any], step: str, calls: int = 1) -> Callable[..., Any]:
    """``real``, then fail on its ``calls``-th call (the step has done its work: processes exist)."""
    seen = {"n": 0}

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        seen["n"] += 1
        if seen["n"] == calls:
            raise Injected(f"injected after {step}")
        return out

    return wrapper


#: step name -> (object holding the step, attribute, which call fails)
STEPS: dict[str, tuple[Any, str, int]] = {
    "fault proxy started": (local, "make_links", 1),
    "proxies created": (ProxiedLinks, "setup", 1),
    "template ready": ("engine", "template_dir", 1),
    "data directories copied": ("engine", "copy_template", 1),
    "principal spawned": (LocalTopology, "_start_locked", 1),
    "standby spawned": (LocalTopology, "_start_locked", 2),
    "principal accepts": (LocalTopology, "_wait_started", 1),
    "standby streams": (LocalTopology, "_wait_streaming", 1),
    "ports handed to the reaper": (LocalTopology, "_hold_reservations", 1),
    "run marked complete": (LocalTopology, "_mark_started", 1),
}


@pytest.mark.parametrize("step", list(STEPS))
def test_a_failure_at_each_step_of_up_leaves_nothing(step: str, home: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pair = LocalPair(detached=True)  # the background fault-proxy process: the leak-prone case
    owner, attr, calls = STEPS[step]
    target = pair.engine if owner == "engine" else owner
    monkeypatch.setattr(target, attr, _after(getattr(target, attr), step, calls))
    seen: dict[str, Any] = {}
    real_save = local.save_state

    def spy_save(path: Path, state: Any) -> None:  # what the run held at its last save
        pids = {n.pid for n in state.nodes if n.pid} | {p.pid for p in state.processes}
        seen.update(ports=set(state.ports), pids=pids,
                    listens={p.client_listen for p in state.links.proxies.values()}
                    | {p.replication_listen for p in state.links.proxies.values()}, url=state.links.url)
        real_save(path, state)

    monkeypatch.setattr(local, "save_state", spy_save)
    with pytest.raises(Injected):
        pair.up()
    assert seen["pids"] or step in ("fault proxy started",), "the step ran before anything was started"
    assert not harness_processes(home)
    assert not [p for p in seen["pids"] if Path(f"/proc/{p}").exists() and _mentions(p, home)]
    ports = set(seen["ports"]) | {int(a.rsplit(":", 1)[1]) for a in seen["listens"]}
    if seen["url"]:
        ports.add(int(seen["url"].rsplit(":", 1)[1]))
    assert not [p for p in ports if listening(p)]
    assert not shm_created_by(seen["pids"])
    assert not list((Path(home) / "runs").iterdir())


REAL_TOXIPROXY = Path(__file__).resolve().parent.parent.parent / "shared" / "toxiproxy" / "toxiproxy-server"


def _use_server(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded server in this process, or the real binary spawned (skipped where none runs)."""
    monkeypatch.delenv("TOXIPROXY_URL", raising=False)
    if kind == "embedded":
        monkeypatch.delenv("TOXIPROXY_SERVER_BIN", raising=False)
        monkeypatch.setenv("PATH", "/usr/bin:/bin")
        return
    binary = os.environ.get("TOXIPROXY_SERVER_BIN") or str(REAL_TOXIPROXY)
    if not os.access(binary, os.X_OK):
        pytest.skip(f"no real toxiproxy-server at {binary}")
    monkeypatch.setenv("TOXIPROXY_SERVER_BIN", binary)


@pytest.mark.parametrize("kind", ["embedded", "real binary"])
def test_a_failure_of_an_in_process_up_leaves_nothing(kind: str, home: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _use_server(kind, monkeypatch)
    pair = LocalPair()  # the fault proxy in this process (not detached)
    monkeypatch.setattr(LocalTopology, "_wait_streaming", _after(LocalTopology._wait_streaming, "streaming"))
    with pytest.raises(Injected):
        pair.up()
    assert not harness_processes(home)
    assert not list((Path(home) / "runs").iterdir())


def test_a_sigkilled_in_process_up_leaves_no_spawned_fault_proxy(home: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real binary is a plain child of the process that runs ``up``: recorded in the run the moment
    it is forked, so the reaper stops it when that process is SIGKILLed half-way."""
    _use_server("real binary", monkeypatch)
    script = ("import sys\nfrom harness.topology import Pair\n"
              "Pair(progress=lambda m: print(m, file=sys.stderr, flush=True)).up()\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "copying the template" in line:
            break
    assert any("toxiproxy-server" in line for line in harness_processes(home))
    proc.kill()
    proc.wait()
    proc.stderr.close()
    assert wait_for(lambda: not harness_processes(home), 30), harness_processes(home)


# --------------------------------------------------- a crashed up: its reaper, else down --all, cleans
def _up_killed_at(line_part: str, env: dict[str, str], first: Callable[[], None] | None = None) -> int:
    """Start ``up --detach`` and SIGKILL it when its progress shows ``line_part`` (after calling
    ``first``, when given); returns its PID."""
    proc = subprocess.Popen([*FH, "up", "--detach"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 90  # generous: CI shares 2 cores between two workers
    for line in proc.stderr:
        if line_part in line:
            break
        assert time.monotonic() < deadline, f"no progress line with {line_part!r}"
    else:
        pytest.fail(f"up ended (exit {proc.wait()}) before {line_part!r}")
    if first is not None:
        first()
    proc.kill()
    proc.wait()
    proc.stderr.close()
    return proc.pid


@pytest.mark.parametrize("step", ["starting the fault proxy", "copying the template", "waiting for n2"])
def test_the_reaper_cleans_a_sigkilled_up(step: str, home: str) -> None:
    _up_killed_at(step, dict(os.environ))
    assert wait_for(lambda: not harness_processes(home), 30), harness_processes(home)
    assert wait_for(lambda: not list((Path(home) / "runs").iterdir()), 10)


def test_down_all_stops_what_a_crashed_up_and_its_reaper_left(home: str) -> None:
    env = dict(os.environ)

    def kill_reaper() -> None:  # the machine crashed, say: no reaper either
        reapers = [line for line in harness_processes(home) if "harness.topology.reaper" in line]
        assert reapers
        for line in reapers:
            os.kill(int(line.split()[0]), signal.SIGKILL)

    _up_killed_at("waiting for n2", env, first=kill_reaper)
    time.sleep(0.5)
    left = harness_processes(home)
    assert any("toxiproxy-server" in line for line in left), left  # the fault proxy is among what is left
    res = subprocess.run([*FH, "down", "--all"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "no runs" not in res.stdout
    assert wait_for(lambda: not harness_processes(home), 15), harness_processes(home)


def test_the_background_fault_proxy_stops_when_its_run_is_gone(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "state.json").write_text("{}")
    proc = subprocess.Popen([*FH, "toxiproxy-server", "--port", "0", "--run-dir", str(run)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None and "listening on" in proc.stdout.readline()
        time.sleep(0.6)
        assert proc.poll() is None  # its run is there: it serves
        (run / "state.json").unlink()
        assert proc.wait(timeout=15) == 0  # it polls every 0.5 s
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------ a disk that fills during up: one line
def test_a_disk_that_fills_during_up_is_one_line_within_seconds(mounted, home: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks pass, then the disk fills (another writer): the copy of the data directories meets
    ENOSPC; ``up`` says so in one ConfigError line within seconds and leaves nothing."""
    disk = mounted("")  # 5 MB: too small to start from; the checks are told about a bigger one below
    subprocess.run(["mount", "-o", "remount,size=200m", str(disk)], check=True)
    disk.chmod(0o755)
    monkeypatch.setenv("FAILOVER_HARNESS_HOME", str(disk))
    real_check = preflight.check_up

    def check_then_fill(engine: str, nodes: int) -> None:
        real_check(engine, nodes)
        with open(disk / "filler", "wb") as fh:  # leave 20 MB: less than one data directory
            fh.write(b"\0" * ((preflight.free_mb(disk) - 20) * 1024 * 1024))

    monkeypatch.setattr(preflight, "check_up", check_then_fill)
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as err:
        LocalPair(detached=True).up()
    assert time.monotonic() - t0 < 20  # seconds, not a hang (2 s measured on a quiet machine)
    message = str(err.value)
    assert "\n" not in message and f"the harness home {disk} has" in message and "MB free, needs ~" in message
    assert wait_for(lambda: not harness_processes(str(disk)), 3), harness_processes(str(disk))
    assert not list((disk / "runs").iterdir())


@pytest.mark.parametrize("command", [["up", "--detach"], ["run", "-k", "no_such_test"], ["status", "--run",
                                     "1206200724-fdd3"], ["down", "--all"]])
def test_every_command_names_a_home_that_is_a_file_in_one_line(command: list[str], tmp_path: Path) -> None:
    bad = tmp_path / "home-file"
    bad.write_text("not a folder\n")
    env = dict(os.environ, FAILOVER_HARNESS_HOME=str(bad), FAILOVER_HARNESS_REPORTS=str(tmp_path / "reports"))
    env.pop("FAILOVER_HARNESS_TEMPLATES", None)
    res = subprocess.run([*FH, *command], env=env, capture_output=True, text=True, timeout=60)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and str(bad) in lines[0] and "it is a file, not a folder" in lines[0], res.stderr
    assert "FAILOVER_HARNESS_HOME" in lines[0] and "internal error" not in lines[0]
