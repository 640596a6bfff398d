"""The icm suites."""
