"""Convergence loops as users write them: ``while`` conditions DaCe 1.0.2 cannot read symbolically.

DaCe turns a ``while`` condition into a symbolic expression on the loop's edges. That fails for the
loop every iterative method has::

    diff = 1.0
    steps = 0
    while diff > tol and steps < max_steps:     # tol, max_steps: scalar arguments
        ...
        diff = np.max(np.abs(B - A))
        steps += 1

``tol`` is a data descriptor, not a symbol ("Cannot create symbol"), and ``diff`` reads as SymPy's
``diff`` function (``SympifyError ... NotImplementedType``). When DaCe's parse of a program fails,
it is parsed once more with the program's source rewritten as NumPy runs it:

* each ``while COND:`` loop becomes ``_dsdfg_go = COND`` before the loop, ``while _dsdfg_go:`` and
  ``_dsdfg_go = COND`` at the end of its body (a ``break`` still leaves it; a loop whose body
  ``continue``s, or that has an ``else``, is left as written);
* a local variable named like a SymPy function (``diff``, ``limit``, ``gamma``) is renamed
  ``_dsdfg_diff`` throughout the function.

A program DaCe parses as written is never rewritten. ``install`` applies the retry inside
``numpy_semantics()``; the rewrite itself is ``rewrite(tree)`` on a function's AST.
"""
from __future__ import annotations

import ast
import contextlib
import copy
import io
import sys
import threading
from typing import Set

__all__ = ["rewrite", "install"]

_PREFIX = "_dsdfg_"
_state = threading.local()


def _sympy_function_names(names: Set[str]) -> Set[str]:
    import sympy
    return {n for n in names if hasattr(sympy, n) and not isinstance(getattr(sympy, n), sympy.Symbol)}


class _Renamer(ast.NodeTransformer):
    def __init__(self, names: Set[str]):
        self.names = names

    def visit_Name(self, node: ast.Name):
        if node.id in self.names:
            return ast.copy_location(ast.Name(id=_PREFIX + node.id, ctx=node.ctx), node)
        return node


def _continues(body) -> bool:
    """Whether a ``continue`` in ``body`` belongs to the loop that holds ``body``."""
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Continue):
            return True
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor, ast.FunctionDef, ast.AsyncFunctionDef,
                             ast.ClassDef, ast.Lambda)):
            stack.extend(getattr(node, "orelse", []))       # a loop's else belongs to the outer loop
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


class _Flags(ast.NodeTransformer):
    """``while COND: BODY`` -> ``go = COND; while go: BODY; go = COND``."""

    def __init__(self):
        self.count = 0

    def visit_FunctionDef(self, node):
        return node         # a nested function is rewritten on its own (``rewrite``)

    def visit_While(self, node: ast.While):
        self.generic_visit(node)
        if node.orelse or _continues(node.body) or isinstance(node.test, (ast.Name, ast.Constant)):
            return node
        self.count += 1
        flag = f"{_PREFIX}go{self.count}"

        def assign():
            return ast.copy_location(ast.Assign(targets=[ast.Name(id=flag, ctx=ast.Store())],
                                                value=copy.deepcopy(node.test)), node)
        loop = ast.copy_location(ast.While(test=ast.Name(id=flag, ctx=ast.Load()), body=node.body + [assign()],
                                           orelse=[]), node)
        return [assign(), loop]


def rewrite(tree: ast.AST) -> ast.AST:
    """``tree`` (a module or function AST) with every program function's ``while`` conditions kept in
    flags and its locals named like SymPy functions renamed (see the module docstring)."""
    for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
        args = {a.arg for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs}
        stored = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        clash = _sympy_function_names(stored - args)
        if clash:
            _Renamer(clash).visit(fn)
        flags = _Flags()
        fn.body = [flags.visit(stmt) for stmt in fn.body]
        fn.body = [s for stmt in fn.body for s in (stmt if isinstance(stmt, list) else [stmt])]
    return ast.fix_missing_locations(tree)


def _may_help(program, exc: BaseException) -> bool:
    """Whether the rewrite may change what failed: the program has a ``while`` loop, or DaCe read a
    name as a SymPy function."""
    import inspect
    text = f"{type(exc).__name__}: {exc}"
    if "SympifyError" in text or "NotImplementedType" in text:
        return True
    try:
        return "while" in inspect.getsource(program.f)
    except (OSError, TypeError, AttributeError):
        return False


@contextlib.contextmanager
def _rewriting():
    old = getattr(_state, "on", False)
    _state.on = True
    try:
        yield
    finally:
        _state.on = old


def install(patches) -> None:
    """Inside ``numpy_semantics()``: a program whose parse fails is parsed once more, rewritten."""
    from dace.frontend.python import parser, preprocessing

    from ..config import WHILE_FLAGS

    original_converter = preprocessing.ModuloConverter
    original_parse = parser.DaceProgram._parse

    class ConverterThenRewrite:
        """DaCe's first AST pass (``%`` for C), then, on the second attempt, ``rewrite``."""

        def visit(self, tree):
            tree = original_converter().visit(tree)
            return rewrite(tree) if getattr(_state, "on", False) else tree

    def _parse(self, *args, **kwargs):
        if getattr(_state, "on", False) or not WHILE_FLAGS.get():     # (read at each parse)
            return original_parse(self, *args, **kwargs)
        said = io.StringIO()        # DaCe prints the line a failed parse stopped at: kept until it is an error
        try:
            with contextlib.redirect_stdout(said):
                sdfg = original_parse(self, *args, **kwargs)
        except Exception as first:  # noqa: BLE001 - a frontend failure: one more try, rewritten
            if not _may_help(self, first):
                sys.stdout.write(said.getvalue())
                raise
            try:
                with _rewriting():
                    return original_parse(self, *args, **kwargs)
            except Exception:  # noqa: BLE001 - the rewrite did not help: DaCe's own error stands
                sys.stdout.write(said.getvalue())
                raise first from None
        sys.stdout.write(said.getvalue())
        return sdfg

    patches.set(preprocessing, "ModuloConverter", ConverterThenRewrite)
    patches.set(parser.DaceProgram, "_parse", _parse)
