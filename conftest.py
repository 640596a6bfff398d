"""Thin: this repository's own runs load the harness pytest plugin through its pytest11 entry point
(installed by ``pip install -e .``); nothing else lives here."""
