"""The durability suites."""
