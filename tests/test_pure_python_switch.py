"""``FAILOVER_HARNESS_PURE_PYTHON=1`` (harness/persistproxy/compiled.py): the persistent proxy's data path
runs its pure-Python framing and tracking even where the compiled extension is built - the path an
install without a C compiler takes - and without the switch the compiled one. Each case imports the
proxy in a fresh interpreter, since the switch is read at import. That both implementations give the
same answers is held by tests/test_frames.py and tests/test_state_fast_paths.py; ``make test`` runs the
proxy's end-to-end tests a second time with the switch set."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness.persistproxy.compiled import PURE_PYTHON_ENV, pure_python_forced

PROBE = """
import json, sys
from harness.persistproxy import datapath, fastpath, frames
print(json.dumps({
    "frames_compiled": frames.COMPILED,
    "tracking_compiled": fastpath.COMPILED,
    "proxy_frames_is_python": datapath.frames is frames.frames_py,
    "proxy_request_is_python": datapath.simple_request is fastpath.simple_request_py,
    "proxy_answer_is_python": datapath.simple_answer is fastpath.simple_answer_py,
    "extension_loaded": "harness.persistproxy._frames" in sys.modules,
}))
"""


def _probe(value: str | None) -> dict[str, bool]:
    env = {k: v for k, v in os.environ.items() if k != PURE_PYTHON_ENV}
    if value is not None:
        env[PURE_PYTHON_ENV] = value
    res = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.mark.parametrize("value", ["1", "true", "YES", " on "])
def test_the_switch_selects_the_python_framing_and_tracking(value: str) -> None:
    seen = _probe(value)
    assert seen == {"frames_compiled": False, "tracking_compiled": False, "proxy_frames_is_python": True,
                    "proxy_request_is_python": True, "proxy_answer_is_python": True,
                    "extension_loaded": False}, seen


@pytest.mark.parametrize("value", [None, "", "0", "no"])
def test_without_the_switch_the_compiled_extension_runs(value: str | None) -> None:
    """The set-up builds the extension (gcc), so unset or off means the compiled path."""
    seen = _probe(value)
    assert seen == {"frames_compiled": True, "tracking_compiled": True, "proxy_frames_is_python": False,
                    "proxy_request_is_python": False, "proxy_answer_is_python": False,
                    "extension_loaded": True}, seen


def test_which_values_force_the_python_path() -> None:
    assert pure_python_forced({PURE_PYTHON_ENV: "1"}) and pure_python_forced({PURE_PYTHON_ENV: "True"})
    assert not pure_python_forced({}) and not pure_python_forced({PURE_PYTHON_ENV: "0"})
    assert not pure_python_forced({PURE_PYTHON_ENV: "2"})  # only the documented values
