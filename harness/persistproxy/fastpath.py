"""One call per chunk for the commonest request cycle on the persistent proxy's data path (PER-1: the
proxy must keep up with the application; PER-2 / PER-4..8: the session state it tracks stays exact).

:func:`simple_request` takes a client chunk that is exactly one statement's [Parse,] Bind,
[Describe,] Execute, Sync; :func:`simple_answer` takes the server's [ParseComplete,] BindComplete,
[RowDescription | NoData,] DataRows, CommandComplete, ReadyForQuery answering exactly that request.
Each frames the chunk and records in the :class:`.state.SessionState` what the message-by-message
tracker would, in one call, or records nothing and says so; the proxy then takes its message loop.

The compiled extension (``_track.c`` in ``harness.persistproxy._frames``, built by ``pip install``)
does both without running the interpreter; without it the same functions run in Python, on top of
:meth:`.state.SessionState.on_simple_request` / ``on_simple_answer``. :data:`COMPILED` says which one
the proxy uses (``FAILOVER_HARNESS_PURE_PYTHON=1`` forces Python: :mod:`.compiled`);
``tests/test_state_fast_paths.py`` holds both to the message-by-message tracker on random histories.
"""

from __future__ import annotations

from collections.abc import Callable

from . import state as _state
from .compiled import extension
from .frames import DATA_ROW, NO_RUNS, frames
from .state import SessionState


def simple_request_py(st: SessionState, buf: bytes) -> bool:
    """Whether ``buf`` is exactly one statement's [Parse,] Bind, [Describe,] Execute, Sync; if so it
    is recorded in ``st`` (as :meth:`SessionState.on_front` of each message would), else nothing is."""
    kinds, ends = frames(buf, NO_RUNS)
    return bool(ends) and ends[-1] == len(buf) and st.on_simple_request(buf, kinds, ends)


def simple_answer_py(st: SessionState, data: bytes) -> int:
    """When the complete messages at the start of ``data`` are exactly the answer to the request in
    flight (:func:`simple_request_py`), it is recorded in ``st`` and the offset past its
    ReadyForQuery returned; else 0, having recorded nothing."""
    kinds, ends = frames(data, DATA_ROW)
    if len(kinds) > 2 and (kinds[0] == 50 or kinds[0] == 49) and st.on_simple_answer(data, kinds, ends):
        return ends[-1]
    return 0


simple_request: Callable[[SessionState, bytes], bool]
simple_answer: Callable[[SessionState, bytes], int]
_ext = extension()
if _ext is None or not hasattr(_ext, "simple_request"):
    # no C compiler where the project was installed (or an older build), or FAILOVER_HARNESS_PURE_PYTHON=1
    simple_request, simple_answer = simple_request_py, simple_answer_py
    COMPILED = False
else:
    _ext.configure(_state.Pending, _state._BIND, _state._SYNC, _state._DESCRIBE, _state._EXECUTE_UNKNOWN,
                   _state._execute_item_for, _state._TAGS)
    simple_request, simple_answer = _ext.simple_request, _ext.simple_answer
    COMPILED = True
