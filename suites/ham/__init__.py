"""The HAM suites: Patroni's documented promises under faults (docs/ha-managers.md)."""
