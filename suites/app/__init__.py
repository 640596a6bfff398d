"""The app suites."""
