"""Control-flow analysis of a program's state machine: how often each state runs per call."""
from __future__ import annotations

from typing import Dict, Set, Tuple

import sympy
from dace.sdfg import SDFG, SDFGState

from .. import dace_compat as dc
from .tiling import iterations

__all__ = ["loop_trips"]


def loop_trips(sdfg: SDFG) -> Dict[SDFGState, Tuple[str, bool]]:
    """How often each state runs per call: ``(count expression, at_most)`` (``"1"`` outside loops).

    Loops are the natural loops of the state machine's back edges; a for-loop's count comes from
    DaCe's loop detection, a loop it cannot read gets ``"?"``. ``at_most``: the loop can be left
    early (a ``break``), so the count is a bound.
    """
    start = sdfg.start_state
    order, on_stack, back = set(), set(), []

    def dfs(u):
        order.add(u)
        on_stack.add(u)
        for e in sdfg.out_edges(u):
            if e.dst in on_stack:
                back.append((u, e.dst))
            elif e.dst not in order:
                dfs(e.dst)
        on_stack.discard(u)

    dfs(start)
    factor: Dict[SDFGState, sympy.Expr] = {}
    bounded: Set[SDFGState] = set()
    for latch, head in back:
        body, todo = {head, latch}, [latch]
        while todo:
            u = todo.pop()
            for e in sdfg.in_edges(u):
                if e.src not in body:
                    body.add(e.src)
                    todo.append(e.src)
        count: sympy.Expr = sympy.Symbol("?")
        entries = [e.dst for e in sdfg.out_edges(head) if e.dst in body]
        if len(entries) == 1:
            try:
                found = dc.find_for_loop(sdfg, head, entries[0])
            except Exception:       # DaCe's detection raises on shapes it does not expect
                found = None
            if found is not None:
                _, (lo, hi, st), _ = found
                count = iterations((lo, hi, st))
        early = any(e.dst not in body for u in body - {head} for e in sdfg.out_edges(u))
        for u in body:
            factor[u] = factor.get(u, sympy.Integer(1)) * count
            if early:
                bounded.add(u)
    return {u: (str(f) if "?" not in str(f) else "?", u in bounded) for u, f in factor.items()}
