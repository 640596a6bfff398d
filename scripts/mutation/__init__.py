"""A mutation test of the rule checkers (docs/mutation.md): ``make mutation`` / ``python -m scripts.mutation``.

Each mutant is one small change to a checker module (a comparison flipped, ``and`` for ``or``, a
constant changed, a statement dropped …). The checker tests run against it; a mutant they fail on
is *killed*, one they pass on *survived* - a behaviour of the checker no test pins down. The kill
rate per module is how much of a checker's logic its tests would notice breaking. See
``docs/mutation.md``.

Modules: :mod:`.sites` (where a module can be mutated), :mod:`.baseline` (the unmutated run that
records which tests reach which function), :mod:`.worker` (one forked process per mutant),
:mod:`.settings` (``[tool.mutation]`` in ``pyproject.toml``), :mod:`.report` (the table and files).
"""
