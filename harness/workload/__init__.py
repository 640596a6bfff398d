"""Workloads (Jepsen's *generator* + *client* loop): operations driven through the client under
test, each recorded in the history as invoke followed by ok / fail / info."""

from harness.workload import mysql_oltp  # noqa: F401 - registers the MySQL-protocol OLTP sessions
from harness.workload.keywriter import KeyWriter, final_read

__all__ = ["KeyWriter", "final_read"]
