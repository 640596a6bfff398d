"""The mirroring suites."""
