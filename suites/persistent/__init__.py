"""The persistent suites."""
