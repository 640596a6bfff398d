"""The *engine* seam: what a backend needs from a database engine to run one node of a topology
(prepare a data directory, configure, start, stop, promote, rewind, connect as admin).

Engines: PostgreSQL 15 (:class:`harness.topology.postgres.PostgresEngine`) and MariaDB 10.11
(:class:`harness.topology.mariadb.MariaDBEngine`). :func:`harness.topology.backend.get_engine` turns
``--engine NAME`` into an engine."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from harness.topology.process import RunAs

_E = TypeVar("_E")


@dataclass(frozen=True)
class Credentials:
    """The unprivileged test login every node of a topology accepts (clients under test use it).
    ``password`` stays in memory (its repr is hidden); ``passfile`` names a 0600 libpq password file
    holding it, for what is printed or handed to another process (harness.redact)."""

    user: str
    password: str = field(repr=False)
    database: str
    passfile: str | None = None


@dataclass(frozen=True)
class NodeConfig:
    """What a node's configuration must say, whatever the engine."""

    port: int
    socket_dir: Path
    application_name: str
    standby_of: tuple[str, int] | None  # the replication address to follow; None on a principal
    hot_standby: bool  # a standby accepts read-only logins (False: rejects them, like a mirror)
    synchronous: bool  # commits wait for a standby (DUR-1)
    partner: str  # the principal's current mirror, client-facing host:port (MIR-9)
    # a standby of a sync topology: an engine whose sync setting is inert on a standby may set it
    # already, so that the node is synchronous from the instant it is promoted - before any reload
    # (DUR-1 for clients resumed as soon as a switchover's new principal is writable: early resume)
    synchronous_on_promotion: bool = False


@runtime_checkable
class Engine(Protocol):
    """One database engine as the local backend drives it, node by node."""

    name: str  # the --engine value
    label: str  # for reports ("PostgreSQL")
    topology_prefix: str  # topology names: "pg" -> pg-pair, pg-group3
    credentials: Credentials  # may be a property (PostgreSQL reads it from the template's password file)

    def server_version(self) -> str:
        """The server's version string (MissingDependencyError with the install command if absent)."""

    def template_dir(self, run_as: RunAs) -> Path:
        """A cached, initialised data directory to copy nodes from."""

    def copy_template(self, template: Path, *dests: Path) -> None:
        """Copy the template into each new node's data directory."""

    def config_text(self, config: NodeConfig) -> str:
        """The node's configuration file."""

    def make_primary(self, datadir: Path) -> None:
        """Prepare a stopped data directory to start as the principal."""

    def make_standby(self, datadir: Path, run_as: RunAs) -> None:
        """Prepare a stopped data directory to start as a standby."""

    def start_server(self, datadir: Path, conf: Path, log: Path, run_as: RunAs, cwd: Path) -> int:
        """Start the server; returns its PID (also its process group)."""

    def wait_ready(self, datadir: Path, pid: int, log: Path, timeout: float = 30) -> None:
        """Wait until the server accepts connections (NodeStartError with its log otherwise)."""

    def wait_writable(self, socket_dir: Path, port: int, pid: int, log: Path, timeout: float = 30,
                      datadir: Path | None = None) -> None:
        """Wait until the server accepts writes (a promoted principal); ``datadir`` lets an engine
        read the server's own status instead of logging in on every poll."""

    def stop_server(self, pid: int, mode: str) -> None:
        """Stop the server: ``fast``, ``immediate`` or ``smart``."""

    def promote(self, datadir: Path, pid: int, run_as: RunAs) -> None:
        """Promote a running standby to principal."""

    def admin_connect(self, socket_dir: Path, port: int) -> Any:
        """A superuser connection over the local socket (harness use; bypasses every proxy)."""

    def rewind(self, datadir: Path, source_socket: Path, source_port: int, run_as: RunAs) -> str:
        """Make a stopped former principal follow the source's timeline (TopologyError if it cannot)."""

    def reclone(self, datadir: Path, source_socket: Path, source_port: int, run_as: RunAs) -> None:
        """Replace a data directory by a fresh copy of the source."""

    def log_tail(self, log: Path, lines: int = 15) -> str:
        """The last lines of a server log (for error messages)."""

    def wait_replica(self, principal_socket: Path, principal_port: int, standby: str, standby_socket: Path,
                     standby_port: int, standby_alive: Callable[[], bool], timeout: float = 30) -> str | None:
        """Wait until ``standby`` replicates from the principal and has everything the principal had
        when asked; None when it has, else the last replication state seen (for the error)."""

    def reload(self, datadir: Path, conf: Path, pid: int | None) -> None:
        """Make a running server apply its rewritten configuration (role, source, sync mode)."""

    def checkpoint(self, socket_dir: Path, port: int) -> None:
        """Make a just-promoted principal's state durable before another node is rewound onto it."""

    def published_partner(self, socket_dir: Path, port: int) -> str | None:
        """What the principal publishes as its mirror (``mirroring.partner``, MIR-9), or None when the
        engine publishes none."""


#: The :class:`Engine` methods every engine module defines as plain functions of the same name.
MODULE_FUNCTIONS: tuple[str, ...] = (
    "server_version", "template_dir", "copy_template", "make_primary", "make_standby", "start_server",
    "stop_server", "promote", "admin_connect", "rewind", "reclone", "log_tail",
)


def module_functions(*extra: str) -> Callable[[type[_E]], type[_E]]:
    """Class decorator of an :class:`Engine` class: each of :data:`MODULE_FUNCTIONS` (and ``extra``)
    becomes the function of that name of the class's own module, as a static method - the table the
    local backend drives every node of every profile's topology by. A function the module lacks, or
    a name the class already defines, is a TypeError at import."""

    def bind(cls: type[_E]) -> type[_E]:
        module = sys.modules[cls.__module__]
        for name in (*MODULE_FUNCTIONS, *extra):
            fn = getattr(module, name, None)
            if not callable(fn) or name in vars(cls):
                raise TypeError(f"engine {cls.__qualname__}: {module.__name__}.{name} must be a function "
                                "and the class must not define it itself")
            setattr(cls, name, staticmethod(fn))
        return cls

    return bind
