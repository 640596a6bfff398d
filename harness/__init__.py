"""failover-harness: brings up primary/mirror database pairs behind a fault proxy, injects faults,
records what a client did and checks it against documented failover rules (see RULEBOOK IDs)."""

__version__ = "0.1.0"
