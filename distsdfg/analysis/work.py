"""How much a map's body does per iteration: the work the time model prices beyond its bytes.

A map whose body is one tasklet does one unit of work per iteration, and the time model prices
it by the bytes it reads and writes. A map whose body holds loops and maps (a row of a triangular
update, ``for i in range(N): for k in range(M): C[i, :i + 1] += A[i, k] * A[:i + 1, k]`` turned
into a map over ``i``; a convolution's window loops in a nested SDFG) does far more: its
iterations each run the innermost body ``trips x extent`` times. ``body_work`` counts those
innermost executions (tasklets, library calls by the elements they read) per iteration of the
map, as an expression in the map's parameters (a triangular body depends on ``i``), with loops
by their trip counts (``controlflow.loop_trips``) and nested SDFGs through their symbol mappings.
A count this analysis cannot read is 1 (the body is priced by its bytes alone, as before).
"""
from __future__ import annotations

import itertools
import math
from typing import Dict, Sequence

import sympy
from dace import symbolic
from dace.sdfg import SDFG, SDFGState, nodes

from .controlflow import loop_trips
from .tiling import iterations

__all__ = ["body_work", "BodyWork"]

#: Trip count assumed for a loop inside a map body whose count the analysis cannot read.
_UNKNOWN_TRIPS = 10


def _volume(rng) -> sympy.Expr:
    n = sympy.Integer(1)
    for r in rng.ranges:
        n *= iterations(r)
    return n


def _scope_work(state: SDFGState, entry, children) -> sympy.Expr:
    total = sympy.Integer(0)
    for n in children.get(entry, ()):
        total += _node_work(state, n, children)
    return total


def _node_work(state: SDFGState, n, children) -> sympy.Expr:
    if isinstance(n, nodes.MapEntry):
        return _volume(n.map.range) * sympy.Max(_scope_work(state, n, children), 1)
    if isinstance(n, nodes.NestedSDFG):
        inner = _sdfg_work(n.sdfg)
        mapping = {symbolic.pystr_to_symbolic(k): symbolic.pystr_to_symbolic(str(v))
                   for k, v in n.symbol_mapping.items()}
        return inner.subs(mapping, simultaneous=True)
    if isinstance(n, nodes.Tasklet):
        return sympy.Integer(1)
    if isinstance(n, nodes.LibraryNode):       # a dot product or a reduction: the elements it reads
        return sum((e.data.volume for e in state.in_edges(n) if not e.data.is_empty()), sympy.Integer(0))
    return sympy.Integer(0)


def _sdfg_work(sdfg: SDFG) -> sympy.Expr:
    trips = loop_trips(sdfg)
    total = sympy.Integer(0)
    for st in sdfg.nodes():
        if not isinstance(st, SDFGState):
            raise TypeError("a control-flow region: counted by bytes only")
        count = trips.get(st, ("1", False))[0]
        times = sympy.Integer(_UNKNOWN_TRIPS) if count == "?" else symbolic.pystr_to_symbolic(count)
        children = st.scope_children()
        total += times * _scope_work(st, None, children)
    return total


class BodyWork:
    """Innermost executions per iteration of a map, with the program's sizes substituted: an
    expression in the iteration's 0-based index along each of the map's labels."""

    def __init__(self, expr: sympy.Expr, labels: Sequence[str]):
        self.expr = expr
        self.labels = tuple(l for l in labels if sympy.Symbol(l) in expr.free_symbols)

    def __repr__(self):
        return f"BodyWork({self.expr})"

    def block(self, bounds: Dict[str, int], parts: Dict[str, int]) -> float:
        """Executions of the heaviest rank's block when the label ``l`` of ``bounds`` is split into
        ``parts[l]`` even blocks: the block's iterations times the work at its middle iteration, for
        the first and the last block along each label the work depends on (a triangular body is
        heaviest at one end)."""
        size = {l: -(-n // max(parts.get(l, 1), 1)) for l, n in bounds.items()}
        iters = math.prod(size.values())
        choices = []
        for l in self.labels[:4]:
            n, b = bounds[l], size[l]
            choices.append(((l, (b - 1) / 2), (l, n - b + (b - 1) / 2)))
        best = 0.0
        for pick in itertools.product(*choices):
            try:
                w = float(self.expr.subs({sympy.Symbol(l): x for l, x in pick}))
            except (TypeError, ValueError):
                return float(iters)
            best = max(best, w)
        return iters * max(best, 1.0)


def body_work(state: SDFGState, entry: nodes.MapEntry, values: Dict[str, int]) -> BodyWork:
    """The innermost executions per iteration of the map at ``entry`` (module docstring), sizes from
    ``values``; 1 where the body is one tasklet or the count cannot be read."""
    params = list(entry.map.params)
    one = BodyWork(sympy.Integer(1), params)
    try:
        expr = sympy.sympify(_scope_work(state, entry, state.scope_children()))
        plain = values

        def concrete(x):
            e = symbolic.pystr_to_symbolic(str(x))
            return e.subs({s: plain.get(str(s), _UNKNOWN_TRIPS) for s in e.free_symbols})
        starts = {p: (concrete(lo), concrete(st)) for p, (lo, _, st) in zip(params, entry.map.range.ranges)}
        subs = {}
        for s in expr.free_symbols:
            name = str(s)
            if name in starts:          # the parameter, as its 0-based index along the label
                lo, st = starts[name]
                subs[s] = lo + st * sympy.Symbol(name)
            else:                       # a size, or one not given (at the guessed trip count)
                subs[s] = plain.get(name, _UNKNOWN_TRIPS)
        expr = expr.subs(subs, simultaneous=True)
    except Exception:       # a body this analysis does not read is priced by its bytes alone
        return one
    if expr.free_symbols - {sympy.Symbol(p) for p in params} or expr == 0:
        return one
    return BodyWork(expr, params)
