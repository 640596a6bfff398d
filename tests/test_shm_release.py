"""A SIGKILLed postmaster leaves its System V shared-memory segment; ``down`` of the run removes it
(otherwise the machine runs out of segments: SHMMNI 4096, and no server can start)."""

from __future__ import annotations

from pathlib import Path

from harness.topology.local import LocalPair
from harness.topology.run import release_shared_memory


def _segment(datadir: Path) -> tuple[str, str]:
    key, shmid = (datadir / "postmaster.pid").read_text().splitlines()[6].split()[:2]
    return key, shmid


def _exists(segment: tuple[str, str]) -> bool:
    return any(row.split()[:2] == list(segment) for row in Path("/proc/sysvipc/shm").read_text().splitlines()[1:])


def test_down_removes_the_segment_of_a_killed_postmaster() -> None:
    with LocalPair(links="direct") as pair:
        datadir = pair.node("n2").datadir
        segment = _segment(datadir)
        assert _exists(segment)
        assert release_shared_memory(datadir) is False  # attached by the running server: kept
        pair.kill("n2")
        assert _exists(segment)  # what PostgreSQL leaves after SIGKILL
    assert not _exists(segment)  # down released it with the run's folder
