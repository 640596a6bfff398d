"""``@module_functions`` (harness/topology/engine.py): each engine class gets its module's functions
as the :class:`Engine` steps, and a module missing one (or a class shadowing one) is refused at
import, not at the first node start."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from harness.topology import mariadb, postgres
from harness.topology.engine import MODULE_FUNCTIONS, Engine, module_functions


@pytest.mark.parametrize(("module", "cls", "extra"), [
    (postgres, postgres.PostgresEngine, ()),
    (mariadb, mariadb.MariaDBEngine, ("config_text", "wait_replica", "wait_ready", "wait_writable", "reload")),
])
def test_every_step_is_the_module_function(module: types.ModuleType, cls: type, extra: tuple[str, ...]) -> None:
    engine = cls()
    assert isinstance(engine, Engine)
    for name in (*MODULE_FUNCTIONS, *extra):
        assert getattr(engine, name) is getattr(module, name), name


@pytest.fixture
def fake_module() -> Iterator[types.ModuleType]:
    module = types.ModuleType("fh_fake_engine")
    for name in MODULE_FUNCTIONS:
        setattr(module, name, lambda *a, _n=name, **k: _n)
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def _engine_class(namespace: dict[str, object] | None = None) -> type:
    return type("FakeEngine", (), {"__module__": "fh_fake_engine", **(namespace or {})})


def test_binds_the_module_functions(fake_module: types.ModuleType) -> None:
    cls = module_functions()(_engine_class())
    assert cls().promote() == "promote"
    assert cls.log_tail is fake_module.log_tail


def test_a_missing_function_is_refused(fake_module: types.ModuleType) -> None:
    del fake_module.rewind
    with pytest.raises(TypeError, match=r"fh_fake_engine\.rewind must be a function"):
        module_functions()(_engine_class())


def test_an_extra_name_the_module_lacks_is_refused(fake_module: types.ModuleType) -> None:
    with pytest.raises(TypeError, match=r"fh_fake_engine\.wait_replica"):
        module_functions("wait_replica")(_engine_class())


def test_a_step_the_class_defines_itself_is_refused(fake_module: types.ModuleType) -> None:
    with pytest.raises(TypeError, match="must not define it itself"):
        module_functions()(_engine_class({"promote": staticmethod(lambda *a: None)}))
