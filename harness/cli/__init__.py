"""The ``failover-harness`` command line. Each sub-command lives in its own module under
``harness.cli`` and adds itself with ``register(subparsers)``; this module only wires them up and
turns every error into one clear line and a non-zero exit code, never a traceback: 2 for bad usage or
configuration (argparse errors too), 3 for a harness error, and 3 with "internal error, please
report" plus the path of a log holding the traceback for anything unexpected."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import NoReturn

from harness.errors import ConfigError, HarnessError
from harness.redact import redact

# Modules that contribute sub-commands, in the order they appear in --help.
COMMAND_MODULES = [
    "harness.cli.topology_cmds",
    "harness.cli.toxiproxy_cmds",
    "harness.cli.report_cmds",
    "harness.cli.run_cmds",
    "harness.cli.persistent_cmds",
    "harness.cli.attach_cmds",
    "harness.cli.matrix_cmds",
    "harness.cli.compose_cmds",
    "harness.cli.nightly_cmds",
    "harness.cli.setup_cmds",
]


EXIT_USAGE, EXIT_HARNESS = 2, 3
#: Sub-commands that create state (runs, templates, reports): the harness home and the reports folder
#: are checked before they start anything (harness.topology.preflight; ``up`` checks the space too).
STATE_COMMANDS = frozenset({"up", "run", "matrix", "nightly", "pgbouncer"})


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line naming the problem and where to read the
    usage (sub-command parsers inherit it)."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE (see PROG --help)`` and exit with 2."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every available sub-command."""
    parser = OneLineParser(
        prog="failover-harness",
        description="Bring up primary/mirror database pairs behind a fault proxy, break them, "
        "and check what clients do against documented failover rules.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # sub-command module not written yet
                continue
            raise
        module.register(sub)
    return parser


def _write_crash_log(exc: BaseException) -> Path | None:
    """Write the traceback of an unexpected error to a log file under the harness home (or the
    temporary folder) and return its path; None if no log could be written anywhere."""
    name = f"internal-error-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    text = redact("".join(traceback.format_exception(exc)))  # no password in the crash log either
    for folder in (lambda: _harness_logs(), lambda: Path(tempfile.gettempdir())):
        try:
            path = folder() / name
            path.write_text(f"failover-harness {' '.join(sys.argv[1:2])}: internal error\n{text}", encoding="utf-8")
            return path
        except Exception:  # noqa: BLE001 - try the next folder
            continue
    return None


def _harness_logs() -> Path:
    from harness.paths import harness_home

    folder = harness_home() / "logs"
    folder.mkdir(exist_ok=True)
    return folder


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _state_folder_problem(exc: BaseException) -> str | None:
    """The one line for an OSError on the harness home or the reports folder (a file where a folder
    should be, a read-only mount, a full disk) that a command met past its checks, else None: a
    configuration problem, never "internal error" (docs/topology.md, "Before anything starts")."""
    from harness.topology import preflight

    if not isinstance(exc, OSError) or not exc.filename:
        return None
    path = str(exc.filename)
    roots = {preflight.HOME_ENV: str(preflight.home_path()),
             preflight.REPORTS_ENV: os.environ.get(preflight.REPORTS_ENV) or ""}
    reason = (exc.strerror or type(exc).__name__).lower()
    if isinstance(exc, FileExistsError) and Path(path).exists() and not Path(path).is_dir():
        reason = "it is a file, not a folder"
    for env, root in roots.items():
        if root and (path == root or path.startswith(root.rstrip("/") + "/")):
            return (f"cannot use {path}: {reason}; set {env} to a writable "
                    f"folder on a disk with free space (e.g. {env}=/tmp/failover-harness)")
    if exc.errno in (28, 122):  # ENOSPC, EDQUOT anywhere else
        return f"no space left for {path}; free some space on its disk or set {preflight.HOME_ENV}"
    return None


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code (OBS-1: a bad input is one
    line and exit 2, a harness error one line and exit 3, never a traceback)."""
    try:
        parser = build_parser()
        argv = sys.argv[1:] if argv is None else list(argv)
        if argv[:1] == ["run"]:  # pytest's options pass through run (harness.cli.run_cmds.split_passthrough)
            from harness.cli.run_cmds import split_passthrough

            argv = ["run", *split_passthrough(argv[1:])]
        args = parser.parse_args(argv)
        if args.command in STATE_COMMANDS:
            from harness.topology.preflight import check_state_folders

            check_state_folders()
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"failover-harness: error: {_one_line(exc, 2000)}", file=sys.stderr)
        return EXIT_USAGE
    except HarnessError as exc:
        print(f"failover-harness: harness error ({type(exc).__name__}): {exc}", file=sys.stderr)
        return EXIT_HARNESS
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - the catch-all: no traceback reaches the user
        folder_problem = _state_folder_problem(exc)
        if folder_problem is not None:
            print(f"failover-harness: error: {_one_line(folder_problem, 2000)}", file=sys.stderr)
            return EXIT_USAGE
        log = _write_crash_log(exc)
        where = f"the traceback is in {log}" if log else "no log could be written"
        print(f"failover-harness: internal error, please report it ({type(exc).__name__}: {_one_line(exc)}); "
              f"{where}", file=sys.stderr)
        return EXIT_HARNESS


if __name__ == "__main__":
    sys.exit(main())
