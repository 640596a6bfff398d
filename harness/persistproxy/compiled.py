"""Which implementation the persistent proxy's data path runs: the compiled extension
``harness.persistproxy._frames`` (``_frames.c`` and ``_track.c``, built by ``pip install`` when a C
compiler is there) or its pure-Python twins in :mod:`.frames` and :mod:`.fastpath`.

``FAILOVER_HARNESS_PURE_PYTHON=1`` (also ``true``, ``yes``, ``on``) forces the pure-Python framing and
tracking even where the extension is built: read once, when :mod:`.frames` and :mod:`.fastpath` are
imported, so set it before the proxy starts (a proxy started as a subprocess inherits it). The two
implementations give the same answers (``tests/test_frames.py``, ``tests/test_state_fast_paths.py``);
the switch lets the proxy's end-to-end tests run on the path an install without a compiler takes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import ModuleType

#: The environment variable that forces the pure-Python data path.
PURE_PYTHON_ENV = "FAILOVER_HARNESS_PURE_PYTHON"
_TRUE = frozenset({"1", "true", "yes", "on"})


def pure_python_forced(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``environ`` (default: this process's environment) forces the pure-Python data path."""
    env = os.environ if environ is None else environ
    return env.get(PURE_PYTHON_ENV, "").strip().lower() in _TRUE


def extension() -> ModuleType | None:
    """The compiled module ``harness.persistproxy._frames``, or None when the pure-Python path is
    forced (:func:`pure_python_forced`) or the extension was not built (no C compiler at install)."""
    if pure_python_forced():
        return None
    try:
        from . import _frames
    except ImportError:
        return None
    return _frames
