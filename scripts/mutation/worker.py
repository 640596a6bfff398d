"""One forked process per mutant, so a mutant can never leak into the next one.

Two ways to put a mutant in (both run pytest in the forked child, like mutmut 3 does):

* **patch** (a site inside a function body that no import runs): compile the mutated module and
  give every live function object of that file the code object compiled from the mutated tree
  (``function.__code__``), so every reference - the registry's wrappers, ``mir_check``'s closures,
  the tests' imported names - runs the mutant. Only the tests that called the function run.
* **reload** (module level, class bodies, defaults, code run while importing): drop every module of
  the repository (``harness``, the tests) from ``sys.modules``, serve the mutated module through an
  import hook and let pytest collect and import everything again. All the tests run.
"""

from __future__ import annotations

import ast
import gc
import importlib
import importlib.abc
import importlib.util
import os
import signal
import sys
import time
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scripts.mutation.baseline import run_items
from scripts.mutation.sites import Site, code_objects

#: pytest's exit statuses that mean the tool, not the mutant, went wrong (usage error, no tests).
TOOL_ERRORS = {4, 5}
#: the child's own status when preparing the mutant failed (a bug of this tool)
PREPARE_FAILED = 70
#: the child's status when the mutated module raises while it is imported: every test would fail
IMPORT_FAILED = 71
_CodeKey = tuple[str, int, int]


def keyed_codes(code: types.CodeType) -> dict[_CodeKey, types.CodeType]:
    """Every function code object nested in a module's code, by ``(qualname, firstlineno, n)``."""
    out: dict[_CodeKey, types.CodeType] = {}
    for c in code_objects(code):
        if c.co_name == "<module>":
            continue
        n = 0
        while (c.co_qualname, c.co_firstlineno, n) in out:
            n += 1
        out[(c.co_qualname, c.co_firstlineno, n)] = c
    return out


@dataclass
class Target:
    """One module under mutation: its file, import name, parsed tree, sites and live functions."""

    path: Path  # absolute
    rel: str
    name: str  # import name
    tree: ast.Module
    sites: list[Site]
    original: dict[_CodeKey, types.CodeType]
    live: dict[_CodeKey, list[types.FunctionType]]

    def compile(self) -> types.CodeType:
        return compile(self.tree, str(self.path), "exec", dont_inherit=True)


def live_functions(targets: Iterable[Target]) -> list[str]:
    """Fill each target's ``live`` map from the objects in memory (after the baseline imported it);
    the problems found (a function of a target file this tool cannot map) are returned."""
    by_file = {str(t.path): t for t in targets}
    lookup = {str(t.path): {code: key for key, code in t.original.items()} for t in by_file.values()}
    problems = []
    for obj in gc.get_objects():
        if not isinstance(obj, types.FunctionType):
            continue
        target = by_file.get(obj.__code__.co_filename)
        if target is None:
            continue
        key = lookup[str(target.path)].get(obj.__code__)
        if key is None:
            problems.append(f"{target.rel}: live function {obj.__qualname__} matches no compiled code object")
            continue
        target.live.setdefault(key, []).append(obj)
    return problems


def _patch(target: Target) -> int:
    """Give the live functions the mutant's code objects; the number of functions changed (0 when
    the mutant cannot be patched in: a closure whose free variables it changed)."""
    mutated = keyed_codes(target.compile())
    changed = 0
    for key, functions in target.live.items():
        new = mutated.get(key)
        if new is None or new == target.original[key]:
            continue
        for fn in functions:
            try:
                fn.__code__ = new
            except ValueError:  # "requires a code object with N free vars"
                return 0
            changed += 1
    return changed


class _Serve(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Import hook: module ``name`` comes from the given (mutated) code object."""

    def __init__(self, name: str, path: Path, code: types.CodeType) -> None:
        self.name, self.path, self.code = name, path, code

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=str(self.path))

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        module.__file__ = str(self.path)
        exec(self.code, module.__dict__)


def _reload(target: Target, repo: Path) -> None:
    """Forget every module loaded from the repository and serve the mutant on the next import."""
    code = target.compile()
    root, tool = str(repo) + os.sep, str(Path(__file__).parent) + os.sep
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None) or ""
        if file.startswith(root) and not file.startswith(tool):
            del sys.modules[name]
    sys.meta_path.insert(0, _Serve(target.name, target.path, code))


@dataclass
class Job:
    """One mutant to run: where, how (``patch`` or ``reload``) and against which tests."""

    target: Target
    site: Site | None  # None: the unmutated module (the tool's self-check)
    mode: str
    tests: list[str]  # node ids (patch mode)
    files: list[str]  # test files (reload mode: everything is collected again)
    timeout: float


def _child(job: Job, repo: Path, pytest_args: list[str], items: dict[str, Any]) -> int:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        if job.site is not None:
            job.site.apply()
        mode = job.mode
        if mode == "patch" and job.site is not None and _patch(job.target) == 0:
            mode = "reload"  # nothing live to patch: import it anew
        if mode == "reload":
            _reload(job.target, repo)
    except Exception:
        return PREPARE_FAILED
    if mode == "reload":
        try:
            importlib.import_module(job.target.name)
        except Exception:
            return IMPORT_FAILED
    if mode == "patch":
        return run_items([items[n] for n in job.tests])
    return int(pytest.main(["-x", *pytest_args, *job.files]))


@dataclass
class Outcome:
    """How one job ended: ``killed``, ``survived``, ``timeout`` or ``error`` (with the status)."""

    job: Job
    status: str
    code: int
    seconds: float


def _outcome(job: Job, wait_status: int, started: float, timed_out: bool) -> Outcome:
    seconds = time.monotonic() - started
    if timed_out:
        return Outcome(job, "timeout", -signal.SIGKILL, seconds)
    code = os.waitstatus_to_exitcode(wait_status)
    if code == 0:
        status = "survived"
    elif code in TOOL_ERRORS or code == PREPARE_FAILED:
        status = "error"
    else:  # tests failed, collection or the import broke, or the mutant crashed the interpreter
        status = "killed"
    return Outcome(job, status, code, seconds)


def run_jobs(
    jobs: list[Job],
    repo: Path,
    pytest_args: list[str],
    items: dict[str, Any],
    workers: int,
    done: Callable[[Outcome], None],
) -> None:
    """Run every job in its own forked child, ``workers`` at a time; ``done`` gets each outcome."""
    queue = list(reversed(jobs))
    gc.collect()
    gc.freeze()  # the children share the parent's pages: a collection there would copy them all
    running: dict[int, tuple[Job, float]] = {}
    try:
        while queue or running:
            while queue and len(running) < workers:
                job = queue.pop()
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:  # the child: never returns
                    gc.disable()
                    code = PREPARE_FAILED
                    try:
                        code = _child(job, repo, pytest_args, items)
                    finally:
                        os._exit(code)
                running[pid] = (job, time.monotonic())
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
            if pid:
                entry = running.pop(pid, None)
                if entry is not None:  # else a process the baseline's tests left behind: reaped, not ours
                    done(_outcome(entry[0], wait_status, entry[1], False))
                continue
            now = time.monotonic()
            for pid, (job, started) in list(running.items()):
                if now - started > job.timeout:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    running.pop(pid)
                    done(_outcome(job, 0, started, True))
            time.sleep(0.005)
    finally:
        for pid in running:  # interrupted: end the children this run started, and reap them
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
