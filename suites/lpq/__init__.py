"""The lpq suites."""
