"""The one compiled part of the project: the persistent proxy's framing walk and one-call tracking
(harness/persistproxy/frames.py, fastpath.py). Everything else is declared in pyproject.toml.
``optional``: without a C compiler the install still succeeds and the proxy uses the same walk and
tracking in Python (``frames.COMPILED`` and ``fastpath.COMPILED`` say which)."""

from setuptools import Extension, setup

SOURCES = ["harness/persistproxy/_frames.c", "harness/persistproxy/_track.c"]
setup(ext_modules=[Extension("harness.persistproxy._frames", SOURCES, depends=["harness/persistproxy/_wire.h"],
                             extra_compile_args=["-O2"], optional=True)])
