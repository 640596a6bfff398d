"""Framing of the persistent proxy's data path (PER-1: the proxy must keep up with the application).

:func:`frames` walks the complete PostgreSQL v3 messages of a chunk in one call and returns their
type bytes and end offsets, a run of DataRows as one entry, so the relay loops spend interpreter
time only on the messages that can change session state (docs/persistent-proxy.md, Performance: the profile charged
most of the proxy's Python time to reading message headers, DataRows above all).

The compiled extension ``harness.persistproxy._frames`` (``_frames.c``, built by ``pip install``)
does the walk; without a C compiler the same function runs in Python (:func:`frames_py`), and
:data:`COMPILED` says which one the proxy uses (``FAILOVER_HARNESS_PURE_PYTHON=1`` forces Python:
:mod:`.compiled`). ``tests/test_frames.py`` holds the two to the same
answers on arbitrary bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from .compiled import extension

_LENGTH = struct.Struct("!i").unpack_from

DATA_ROW = 68  # the backend's 'D': the type whose runs collapse on the back connection
NO_RUNS = -1  # the frontend's 'D' is Describe: collapse nothing


def frames_py(data: bytes, run_type: int) -> tuple[bytes, list[int]]:
    """The complete messages of ``data`` from its start as ``(kinds, ends)``: one type byte and one
    end offset per message, consecutive messages of type ``run_type`` merged into one entry (pass
    :data:`NO_RUNS` to merge nothing). Stops before fewer than 5 bytes, a length below 4 (the caller
    names that error) or an incomplete message: the caller reads the header at the last end."""
    kinds = bytearray()
    ends: list[int] = []
    n = len(data)
    pos = 0
    while n - pos >= 5:
        t = data[pos]
        length = _LENGTH(data, pos + 1)[0]
        if length < 4:
            break
        end = pos + 1 + length
        if end > n:
            break
        if t == run_type and kinds and kinds[-1] == run_type:
            ends[-1] = end
        else:
            kinds.append(t)
            ends.append(end)
        pos = end
    return bytes(kinds), ends


frames: Callable[[bytes, int], tuple[bytes, list[int]]]
_ext = extension()
if _ext is None:  # no C compiler where the project was installed, or FAILOVER_HARNESS_PURE_PYTHON=1
    frames = frames_py
    COMPILED = False
else:
    frames = _ext.frames
    COMPILED = True
