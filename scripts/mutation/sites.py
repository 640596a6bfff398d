"""Where a module can be mutated: one :class:`Site` per mutant, found by walking its ``ast``.

The operators (the classic set of mutmut / PIT, kept small):

* ``compare``: ``<``/``<=``, ``>``/``>=``, ``==``/``!=``, ``in``/``not in``, ``is``/``is not`` swapped;
* ``boolop``: ``and``/``or`` swapped; ``not``: ``not x`` → ``x``;
* ``arith``: ``+``/``-``, ``*``/``/``, ``//`` → ``/``, ``%`` → ``//`` (also in ``+=`` …);
* ``constant``: ``True``/``False`` swapped, a number plus one, a word ``"x"`` → ``"XXxXX"``;
* ``call``: ``min``/``max``, ``any``/``all`` swapped;
* ``flow``: ``break``/``continue`` swapped; ``return x`` → ``return None``; a call statement dropped.

Never mutated, by rule (documented in docs/mutation.md): docstrings, annotations, f-strings and
prose (a string constant holding whitespace is a message to a human, not a value any code
compares), ``__all__`` and imports. A site is named without line numbers - ``"<scope>: <before> ->
<after>"`` plus ``#n`` when the same text repeats in a scope - so a list of equivalent mutants keeps
naming the same ones when other code moves.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

#: A function as both the profiler and the compiler name it: ``(co_qualname, co_firstlineno)``.
FuncKey = tuple[str, int]

_COMPARE: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
    ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
_ARITH: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv,
}
_CALLS = {"min": "max", "max": "min", "any": "all", "all": "any"}
_WIDTH = 80


@dataclass
class Slot:
    """A place in the tree that holds one node or value: ``obj.attr`` or ``obj[attr]``."""

    obj: Any
    attr: str | int

    def get(self) -> Any:
        return self.obj[self.attr] if isinstance(self.attr, int) else getattr(self.obj, self.attr)

    def set(self, value: Any) -> None:
        if isinstance(self.attr, int):
            self.obj[self.attr] = value
        else:
            setattr(self.obj, self.attr, value)


@dataclass
class Site:
    """One mutant of one module: what it changes, where, and which functions' bodies hold it."""

    module: str
    line: int
    end_line: int
    scope: str
    operator: str
    before: str
    after: str
    #: The enclosing functions whose body holds the site, outermost first; empty at module or class
    #: level (and in a top-level function's defaults), which run only when the module is imported.
    funcs: tuple[FuncKey, ...]
    #: at module level: the function whose decorator or default holds the site, the names the
    #: statement assigns (the tests that reach those run first)
    owner: FuncKey | None = None
    assigns: tuple[str, ...] = ()
    key: str = ""
    slot: Slot | None = field(default=None, repr=False)
    new: Any = field(default=None, repr=False)
    old: Any = field(default=None, repr=False)

    def apply(self) -> None:
        """Put the mutant into the (shared) tree."""
        assert self.slot is not None
        self.old = self.slot.get()
        self.slot.set(self.new)

    def revert(self) -> None:
        """Take it out again."""
        assert self.slot is not None
        self.slot.set(self.old)


def _short(node: ast.AST) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= _WIDTH else text[: _WIDTH - 1] + "…"


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _constant(value: Any) -> Any:
    """The mutated constant, or ``None`` when the constant is not mutated."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 1.0
    if isinstance(value, str) and not any(ch.isspace() for ch in value):
        return f"XX{value}XX" if value else "XX"
    return None


@dataclass
class _Scope:
    qualname: str  # "" at module level
    funcs: tuple[FuncKey, ...]

    def child(self, name: str, func: FuncKey | None) -> _Scope:
        if func is None:  # a class body: runs where it is defined
            return _Scope(f"{self.qualname}{name}.", self.funcs)
        return _Scope(f"{self.qualname}{name}.<locals>.", (*self.funcs, func))

    @property
    def name(self) -> str:
        text = self.qualname.removesuffix(".").removesuffix(".<locals>")
        return text or "<module>"


class _Walker:
    """Depth-first, in field order: the same tree always yields the same sites in the same order."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.sites: list[Site] = []
        self.owner: FuncKey | None = None
        self.assigns: tuple[str, ...] = ()
        #: name -> the functions whose bodies load it (``None``: module-level code)
        self.users: dict[str, set[FuncKey | None]] = {}

    def site(self, scope: _Scope, node: ast.AST, operator: str, slot: Slot, new: Any, shown: ast.AST) -> None:
        before = _short(shown)
        old = slot.get()
        slot.set(new)
        try:
            after = _short(shown if shown is not old else new)
        finally:
            slot.set(old)
        line = getattr(node, "lineno", None) or shown.lineno  # type: ignore[attr-defined]
        end = getattr(node, "end_lineno", None) or line
        owner, assigns = (self.owner, self.assigns) if not scope.funcs else (None, ())
        self.sites.append(
            Site(self.module, line, end, scope.name, operator, before, after, scope.funcs, owner, assigns,
                 slot=slot, new=new)
        )

    # -- traversal --------------------------------------------------------------------------

    def body(self, stmts: list[ast.stmt], scope: _Scope, *, docstring: bool) -> None:
        for i, stmt in enumerate(stmts):
            if docstring and i == 0 and _is_docstring(stmt):
                continue
            if not scope.funcs:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
                self.assigns = tuple(t.id for t in targets if isinstance(t, ast.Name))
            self.stmt(stmt, Slot(stmts, i), scope)
        if not scope.funcs:
            self.assigns = ()

    def stmt(self, node: ast.stmt, slot: Slot, scope: _Scope) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom | ast.Global | ast.Nonlocal):
            return
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            self.function(node, scope)
            return
        if isinstance(node, ast.ClassDef):
            for sub in (*node.decorator_list, *node.bases, *node.keywords):
                self.visit(sub, node, scope)
            self.body(node.body, scope.child(node.name, None), docstring=True)
            return
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        self.flow(node, slot, scope)
        for name, value in ast.iter_fields(node):
            if name in ("annotation", "msg") and isinstance(node, ast.AnnAssign | ast.Assert):
                continue
            self.field(node, name, value, scope)

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, scope: _Scope) -> None:
        # decorators and defaults run where the function is defined, its body when it is called
        first = min([d.lineno for d in node.decorator_list] + [node.lineno])
        key = (f"{scope.qualname}{node.name}", first)
        self.owner = key
        for sub in node.decorator_list:
            self.visit(sub, node, scope)
        self.arguments(node.args, scope)
        self.owner = None
        self.body(node.body, scope.child(node.name, key), docstring=True)

    def arguments(self, args: ast.arguments, scope: _Scope) -> None:
        for default in (*args.defaults, *(d for d in args.kw_defaults if d is not None)):
            self.visit(default, args, scope)

    def field(self, node: ast.AST, name: str, value: Any, scope: _Scope) -> None:
        if isinstance(value, list):
            if value and isinstance(value[0], ast.stmt):
                self.body(value, scope, docstring=False)
                return
            for item in value:
                if isinstance(item, ast.AST):
                    self.visit(item, node, scope)
        elif isinstance(value, ast.AST):
            if isinstance(value, ast.stmt):
                self.stmt(value, Slot(node, name), scope)
            else:
                self.visit(value, node, scope, Slot(node, name))

    def visit(self, node: ast.AST, parent: ast.AST, scope: _Scope, slot: Slot | None = None) -> None:
        if isinstance(node, ast.stmt):
            self.stmt(node, slot or Slot(parent, "body"), scope)
            return
        if isinstance(node, ast.JoinedStr):
            return  # an f-string: a message
        if isinstance(node, ast.Lambda):
            self.arguments(node.args, scope)
            self.visit(node.body, node, scope, Slot(node, "body"))
            return
        self.expr(node, parent, scope, slot)
        for name, value in ast.iter_fields(node):
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, ast.AST):
                        self.visit(item, node, scope, Slot(value, i))
            elif isinstance(value, ast.AST):
                self.visit(value, node, scope, Slot(node, name))

    # -- operators --------------------------------------------------------------------------

    def expr(self, node: ast.AST, parent: ast.AST, scope: _Scope, slot: Slot | None) -> None:
        used = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if used is not None:
            self.users.setdefault(used, set()).add(scope.funcs[-1] if scope.funcs else None)
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _COMPARE:
                    self.site(scope, node, "compare", Slot(node.ops, i), _COMPARE[type(op)](), node)
        elif isinstance(node, ast.BoolOp):
            flipped = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            self.site(scope, node, "boolop", Slot(node, "op"), flipped, node)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and slot is not None:
            self.site(scope, node, "not", slot, node.operand, node)
        elif isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in _ARITH:
            self.site(scope, node, "arith", Slot(node, "op"), _ARITH[type(node.op)](), node)
        elif isinstance(node, ast.Constant):
            new = _constant(node.value)
            if new is not None:
                shown = parent if isinstance(parent, ast.expr | ast.keyword) and len(_short(parent)) < _WIDTH else node
                self.site(scope, node, "constant", Slot(node, "value"), new, shown)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS:
            self.site(scope, node, "call", Slot(node.func, "id"), _CALLS[node.func.id], node)

    def flow(self, node: ast.stmt, slot: Slot, scope: _Scope) -> None:
        if isinstance(node, ast.Break | ast.Continue):
            new = ast.copy_location(ast.Continue() if isinstance(node, ast.Break) else ast.Break(), node)
            self.site(scope, node, "flow", slot, new, node)
        elif isinstance(node, ast.Return) and node.value is not None:
            if not (isinstance(node.value, ast.Constant) and node.value.value is None):
                self.site(scope, node, "flow", Slot(node, "value"), ast.copy_location(ast.Constant(None), node), node)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            self.site(scope, node, "flow", slot, ast.copy_location(ast.Pass(), node), node)


def find_sites(module: str, tree: ast.Module, users: dict[str, set[FuncKey | None]] | None = None) -> list[Site]:
    """Every mutant of ``tree`` (the parsed ``module``, a repo-relative path), in a fixed order, each
    with its line-free ``key``; ``users`` (if given) is filled with the functions using each name."""
    walker = _Walker(module)
    if users is not None:
        walker.users = users
    walker.body(tree.body, _Scope("", ()), docstring=True)
    seen: dict[str, int] = {}
    for s in walker.sites:
        base = f"{s.scope}: {s.before} -> {s.after}"
        seen[base] = seen.get(base, 0) + 1
        s.key = base if seen[base] == 1 else f"{base} #{seen[base]}"
    return walker.sites


def code_objects(code: Any) -> Iterator[Any]:
    """``code`` and every code object nested in its constants, depth first."""
    yield code
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            yield from code_objects(const)
