"""The one compiled part of the project: the persistent proxy's framing walk (harness/persistproxy/frames.py).
Everything else is declared in pyproject.toml. ``optional``: without a C compiler the install still
succeeds and the proxy uses the same walk in Python (``harness.persistproxy.frames.COMPILED`` says which)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("harness.persistproxy._frames", ["harness/persistproxy/_frames.c"],
                             extra_compile_args=["-O2"], optional=True)])
