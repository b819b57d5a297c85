"""Whether a kernel is linear in some of its inputs (so that it may run on partial sums).

A kernel ``f`` with ``f(a + b) = f(a) + f(b)`` in an input maps partial sums of that input to
partial sums of its output: every rank can apply it to its own partial copy, and the sums are
combined once, after it (``lowering/replicate.py``). ``tasklet_linear`` decides that for a
tasklet's Python code by its syntax: sums, differences and negations of linear terms, products
and quotients of one linear term by terms that do not read the inputs, and conditional
expressions whose condition does not read them and whose branches are linear or zero.
``kernel_linear`` applies it to every tasklet of a map kernel; a matrix product is linear in
either operand while the other is fixed, a sum-reduction in its input. Example:
``_o = (0.0 if _m else _g)`` is linear in ``_g``; ``_o = _g * _g`` and ``_o = _g + 1.0`` are not.
"""
from __future__ import annotations

import ast
from typing import Dict, Iterable, Optional, Set

from dace.sdfg import nodes

from ..values.modes import KernelKind

__all__ = ["tasklet_linear", "kernel_linear"]

_CONST, _ZERO, _LIN = "const", "zero", "lin"


def _cast_call(node: ast.Call) -> bool:
    """``dace.float32(x)``, ``float(x)`` and the like: a cast of one argument."""
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
    return len(node.args) == 1 and not node.keywords and (
        name in ("float", "int") or name.startswith(("float", "int", "uint", "complex")))


def _join(a: str, b: str) -> Optional[str]:
    """Both terms of a sum or both branches of a choice."""
    if _LIN in (a, b):
        return _LIN if {a, b} <= {_LIN, _ZERO} else None
    return _ZERO if a == b == _ZERO else _CONST


def _kind(node: ast.AST, env: Dict[str, str]) -> Optional[str]:
    """``zero``, ``const`` (reads no linear input) or ``lin`` (linear in them); None: neither."""
    if isinstance(node, ast.Constant):
        return _ZERO if node.value == 0 and not isinstance(node.value, bool) else _CONST
    if isinstance(node, ast.Name):
        return env.get(node.id, _CONST)
    if isinstance(node, ast.Attribute):
        return _CONST
    if isinstance(node, ast.Call):
        if _cast_call(node):
            return _kind(node.args[0], env)
        ok = not node.keywords and all(_kind(a, env) in (_CONST, _ZERO) for a in node.args)
        return _CONST if ok else None
    if isinstance(node, ast.UnaryOp):
        k = _kind(node.operand, env)
        if isinstance(node.op, (ast.USub, ast.UAdd)):
            return k
        return _CONST if k in (_CONST, _ZERO) else None
    if isinstance(node, ast.BinOp):
        a, b = _kind(node.left, env), _kind(node.right, env)
        if a is None or b is None:
            return None
        if isinstance(node.op, (ast.Add, ast.Sub)):
            return _join(a, b)
        if isinstance(node.op, ast.Mult):
            if _ZERO in (a, b):
                return _ZERO
            return _LIN if {a, b} == {_LIN, _CONST} else (_CONST if a == b == _CONST else None)
        if isinstance(node.op, ast.Div):
            return None if b == _LIN else a
        return _CONST if a in (_CONST, _ZERO) and b in (_CONST, _ZERO) else None
    if isinstance(node, ast.IfExp):
        if _kind(node.test, env) not in (_CONST, _ZERO):
            return None
        a, b = _kind(node.body, env), _kind(node.orelse, env)
        return None if a is None or b is None else _join(a, b)
    if isinstance(node, (ast.Compare, ast.BoolOp)):
        parts = [node.left, *node.comparators] if isinstance(node, ast.Compare) else node.values
        return _CONST if all(_kind(p, env) in (_CONST, _ZERO) for p in parts) else None
    return None


def tasklet_linear(code: str, linear: Iterable[str], outputs: Iterable[str]) -> bool:
    """Whether the tasklet ``code`` computes every output connector as a linear function of the
    input connectors ``linear`` (the others held fixed)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    env = {c: _LIN for c in linear}
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            return False
        k = _kind(stmt.value, env)
        if k is None:
            return False
        env[stmt.targets[0].id] = k
    return all(env.get(o) in (_LIN, _ZERO) for o in outputs)


def kernel_linear(kernel, arrays: Set[str]) -> bool:
    """Whether ``kernel`` (``analysis.kernels.Kernel``) is linear in the inputs ``arrays`` (read by
    name or through a view of that name)."""
    state, node = kernel.state, kernel.node
    if kernel.kind == KernelKind.LIBRARY:
        kind = type(node).__name__
        read = {e.data.data for e in state.in_edges(node) if not e.data.is_empty()}
        if kind in ("MatMul", "BatchedMatMul"):
            return len(read & arrays) <= 1
        if kind == "Reduce":
            wcr = str(getattr(node, "wcr", "")).replace(" ", "")
            return wcr in ("lambdaa,b:a+b", "lambdax,y:x+y")
        return False
    if kernel.kind != KernelKind.MAP:
        return False
    inner = state.scope_subgraph(node, include_entry=False, include_exit=False)
    for n in inner.nodes():
        if isinstance(n, nodes.AccessNode):
            continue
        if not isinstance(n, nodes.Tasklet) or n.code.language.name != "Python":
            return False
        # The state's edges: the scope's subgraph leaves out those from the map entry and to its
        # exit, and with them every input and output (every tasklet would pass as linear).
        lin = {e.dst_conn for e in state.in_edges(n) if not e.data.is_empty() and e.data.data in arrays}
        outs = {e.src_conn for e in state.out_edges(n) if not e.data.is_empty()}
        if not outs or any(e.data.wcr is not None for e in state.out_edges(n)) \
                or not tasklet_linear(n.code.as_string, lin, outs):
            return False
    return True
