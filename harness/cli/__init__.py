"""The ``failover-harness`` command line. Each sub-command lives in its own module under
``harness.cli`` and adds itself with ``register(subparsers)``; this module only wires them up and
turns harness errors into one clear line and a non-zero exit code (no deep tracebacks)."""

from __future__ import annotations

import argparse
import importlib
import sys

from harness.errors import ConfigError, HarnessError

# Modules that contribute sub-commands, in the order they appear in --help.
COMMAND_MODULES = [
    "harness.cli.topology_cmds",
    "harness.cli.toxiproxy_cmds",
    "harness.cli.report_cmds",
    "harness.cli.run_cmds",
    "harness.cli.persistent_cmds",
    "harness.cli.matrix_cmds",
    "harness.cli.compose_cmds",
    "harness.cli.nightly_cmds",
]


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every available sub-command."""
    parser = argparse.ArgumentParser(
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


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"failover-harness: error: {exc}", file=sys.stderr)
        return 2
    except HarnessError as exc:
        print(f"failover-harness: harness error ({type(exc).__name__}): {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
