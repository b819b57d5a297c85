"""Accumulations in maps: read-modify-write turned into write-conflict resolution.

A map that accumulates with a plain read-modify-write (``Z[i, k] = max(Z[i, k], e)``,
``s[0] = s[0] + e``) writes the same element from many iterations. Split over a parameter
the element does not depend on, every rank would hold a partial result that nothing
combines. ``AccumulationToWCR`` rewrites such writes into write-conflict-resolution memlets
(the operator moves from the tasklet onto the memlet), so that the lowering combines the
ranks' partial results with the operator's MPI reduction, exactly as for the ``+=`` the
frontend already turns into WCR. It also marks the outer memlets of a nested SDFG (a map
body with a branch) whose inner writes all accumulate with one operator.

What it recognises, per written array of a top-level map:

* directly in the map: a tasklet ``out = acc OP e`` / ``out = e OP acc`` (OP in ``+ *``),
  ``out = acc - e``, or ``out = max(acc, e)`` / ``min``, where ``acc`` reads the very element
  the map writes and nothing else in the map reads the array; copies (``out = inp``) between
  that tasklet and the write are allowed;
* in a nested SDFG body (``if`` inside a map): every write of the array is either a WCR
  memlet or such a tasklet reading the same element from an access node of the array, all
  with one operator, and nothing else reads the array.

Only writes that some map parameter does not index are rewritten (elsewhere each iteration
owns its element). Anything else is left as it is; ``constraints.kernel_constraints`` then refuses a plain write
that a split parameter does not index unless every rank provably writes the same values.
"""
from __future__ import annotations

import ast
from typing import Optional, Tuple

from dace import Memlet, dtypes, nodes, properties
from dace.sdfg import SDFG, SDFGState
from dace.transformation import pass_pipeline as ppl

from .. import dace_compat as dc

__all__ = ["AccumulationToWCR", "accumulations_to_wcr", "WCR_LAMBDA"]

#: The write-conflict lambda of each reduction operator.
WCR_LAMBDA = {"sum": "lambda a, b: a + b", "prod": "lambda a, b: a * b",
              "max": "lambda a, b: max(a, b)", "min": "lambda a, b: min(a, b)"}

_BINOPS = {ast.Add: "sum", ast.Mult: "prod", ast.Sub: "sum"}


def _single_assign(t: nodes.Tasklet) -> Optional[ast.Assign]:
    if not isinstance(t, nodes.Tasklet) or t.language != dtypes.Language.Python:
        return None
    code = t.code.code
    if len(code) != 1 or not isinstance(code[0], ast.Assign) or len(code[0].targets) != 1:
        return None
    tgt = code[0].targets[0]
    if not isinstance(tgt, ast.Name) or tgt.id not in t.out_connectors:
        return None
    return code[0]


def _is_copy(t) -> bool:
    """A tasklet ``out = inp`` with one input and one output."""
    a = _single_assign(t)
    return (a is not None and len(t.in_connectors) == 1 and len(t.out_connectors) == 1
            and isinstance(a.value, ast.Name) and a.value.id in t.in_connectors)


def _names(node: ast.AST) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _match_expr(v: ast.AST, acc: str) -> Optional[Tuple[str, ast.AST]]:
    """``(op, e)`` when expression ``v`` is ``op(acc, e)`` with ``e`` free of ``acc``."""
    other, op = None, None
    if isinstance(v, ast.BinOp) and type(v.op) in _BINOPS:
        op = _BINOPS[type(v.op)]
        if isinstance(v.left, ast.Name) and v.left.id == acc:
            other = v.right
            if isinstance(v.op, ast.Sub):
                other = ast.UnaryOp(op=ast.USub(), operand=other)
        elif isinstance(v.right, ast.Name) and v.right.id == acc and not isinstance(v.op, ast.Sub):
            other = v.left
    elif (isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in ("max", "min")
          and len(v.args) == 2 and not v.keywords):
        op = v.func.id
        x, y = v.args
        if isinstance(x, ast.Name) and x.id == acc:
            other = y
        elif isinstance(y, ast.Name) and y.id == acc:
            other = x
    if other is None or acc in _names(other):
        return None
    return op, other


def match_update(t: nodes.Tasklet, acc: str) -> Optional[Tuple[str, str]]:
    """``(op, new code)`` when tasklet ``t`` computes ``op(acc, e)`` with ``acc`` its input connector
    and ``e`` free of ``acc``; the new code computes ``e`` alone (what the WCR memlet adds)."""
    a = _single_assign(t)
    m = None if a is None else _match_expr(a.value, acc)
    if m is None:
        return None
    return m[0], f"{a.targets[0].id} = {ast.unparse(m[1])}"


def _passthrough(state: SDFGState, n) -> bool:
    """A node a value only passes through: a copy tasklet or a transient scalar with one writer and one reader."""
    if isinstance(n, nodes.AccessNode):
        desc = n.desc(state.sdfg)
        return desc.transient and desc.total_size == 1 and state.in_degree(n) == 1 and state.out_degree(n) == 1
    return _is_copy(n) and state.in_degree(n) == 1


def _producer(state: SDFGState, edge) -> Optional[nodes.Tasklet]:
    """Walk back from a write ``edge`` over copies: the tasklet that computes the value."""
    n = edge.src
    while _passthrough(state, n) and state.out_degree(n) == 1:
        n = state.in_edges(n)[0].src
    return n if isinstance(n, nodes.Tasklet) else None


def _remove_read(state: SDFGState, edge):
    """Remove the memlet path that ends in ``edge``; an outer access node that other writers
    fill keeps ordering the scope after them (an empty edge)."""
    head = state.memlet_path(edge)[0]
    src, dst = head.src, head.dst
    state.remove_memlet_path(edge)
    if src is not dst and src in state.nodes() and dst in state.nodes() and state.in_degree(src) > 0:
        state.add_nedge(src, dst, Memlet())


def _convert(state: SDFGState, t: nodes.Tasklet, read, code: str):
    """Make ``t`` compute only the contribution: drop the accumulator's read edge and connector."""
    conn = read.dst_conn
    t.code = properties.CodeBlock(code)
    _remove_read(state, read)
    if conn in t.in_connectors:
        t.remove_in_connector(conn)


def _set_wcr(state: SDFGState, edge, op: str):
    for e in state.memlet_path(edge):
        e.data.wcr = WCR_LAMBDA[op]


def _direct(state: SDFGState, entry: nodes.MapEntry, write, dry_run: bool = False) -> bool:
    """A tasklet directly in the map updates the element ``write`` stores (rewritten unless ``dry_run``)."""
    arr = write.data.data
    t = _producer(state, write)
    if t is None or state.entry_node(t) is not entry:
        return False
    reads = [e for e in state.out_edges(entry) if not e.data.is_empty() and e.data.data == arr]
    writes = [e for e in state.in_edges(state.exit_node(entry)) if not e.data.is_empty() and e.data.data == arr]
    if len(reads) != 1 or len(writes) != 1 or reads[0].dst is not t or reads[0].data.subset != write.data.subset:
        return False
    m = match_update(t, reads[0].dst_conn)
    if m is None:
        return False
    if dry_run:
        return True
    _convert(state, t, reads[0], m[1])
    _set_wcr(state, write, m[0])
    return True


def _symbol_update(inner: SDFG, t: nodes.Tasklet, aliases: set):
    """A tasklet ``out = s`` whose symbol ``s`` an interstate edge assigns as ``op(acc, e)``
    (how the frontend writes ``count = count + 1`` in a branch): ``(op, edge, s, e)``."""
    a = _single_assign(t)
    if a is None or t.in_connectors or not isinstance(a.value, ast.Name):
        return None
    sym = a.value.id
    found = [e for e in inner.all_interstate_edges() if sym in e.data.assignments]
    if len(found) != 1:
        return None
    expr = ast.parse(str(found[0].data.assignments[sym]), mode="eval").body
    accs = _names(expr) & aliases
    if len(accs) != 1:
        return None
    m = _match_expr(expr, accs.pop())
    return None if m is None else (m[0], found[0], sym, ast.unparse(m[1]))


def _nested(state: SDFGState, ns: nodes.NestedSDFG, write, dry_run: bool = False) -> bool:
    """Every write of the nested SDFG's output ``conn`` accumulates with one operator; the element
    may be read through other input connectors (the frontend's ``_r`` copies) only to accumulate
    (rewritten unless ``dry_run``)."""
    conn, inner = write.src_conn, ns.sdfg
    outer_in = [e for e in state.in_edges(ns) if not e.data.is_empty() and e.data.data == write.data.data]
    if any(e.data.subset != write.data.subset for e in outer_in):
        return False
    aliases = {conn} | {e.dst_conn for e in outer_in}
    ops, tasklets, symbols = set(), [], []
    for st in inner.all_states():
        for n in st.nodes():
            if isinstance(n, (nodes.NestedSDFG, nodes.EntryNode)) and aliases & _data_in(st, n):
                return False          # deeper scopes: not analysed
            if not isinstance(n, nodes.AccessNode) or n.data not in aliases:
                continue
            for w in st.in_edges(n):
                if w.data.is_empty():
                    continue
                if n.data != conn:
                    return False
                if w.data.wcr is not None:
                    op = dc.reduction_op(w.data.wcr)
                    if op is None:
                        return False
                    ops.add(op)
                    continue
                t = _producer(st, w)
                if t is None or st.entry_node(t) is not None:
                    return False
                rd = [e for e in st.in_edges(t) if isinstance(e.src, nodes.AccessNode) and e.src.data in aliases]
                if not rd:
                    su = _symbol_update(inner, t, aliases)
                    if su is None:
                        return False
                    ops.add(su[0])
                    symbols.append(su[1:])
                elif len(rd) == 1 and rd[0].data.subset == w.data.subset and st.out_degree(rd[0].src) == 1:
                    m = match_update(t, rd[0].dst_conn)
                    if m is None:
                        return False
                    ops.add(m[0])
                    tasklets.append((st, t, rd[0], m[1], w))
                else:
                    return False
    # The element must not be read for anything but the recognised updates.
    used = {id(x[2]) for x in tasklets}
    for st in inner.all_states():
        for n in st.data_nodes():
            if n.data in aliases and any(not r.data.is_empty() and id(r) not in used for r in st.out_edges(n)):
                return False
    # Interstate edges may read the element only in the recognised ``s = op(acc, e)``, and the
    # symbol ``s`` may be used by nothing but its update tasklet.
    sym_edges = {(id(e), s) for e, s, _ in symbols}
    for e in inner.all_interstate_edges():
        if {str(x) for x in e.data.condition.get_free_symbols()} & (aliases | {s for _, s, _ in symbols}):
            return False
        for s, v in e.data.assignments.items():
            names = _names(ast.parse(str(v), mode="eval"))
            if (names & aliases and (id(e), s) not in sym_edges) or names & {y for _, y, _ in symbols}:
                return False
    users = [t for st in inner.all_states() for t in st.nodes() if isinstance(t, nodes.Tasklet)
             and {str(x) for x in t.free_symbols} & {y for _, y, _ in symbols}]
    if len(users) != len(symbols):
        return False
    if len(ops) != 1:
        return False
    if dry_run:
        return True
    op = ops.pop()
    for st, t, rd, code, w in tasklets:
        src = rd.src
        _convert(st, t, rd, code)
        if src in st.nodes() and st.degree(src) == 0:
            st.remove_node(src)
    for e, s, expr in symbols:
        e.data.assignments[s] = expr
    for st in inner.all_states():
        for n in st.data_nodes():
            if n.data == conn:
                for w in st.in_edges(n):
                    if not w.data.is_empty():
                        w.data.wcr = WCR_LAMBDA[op]
    for e in outer_in:
        c = e.dst_conn
        _remove_read(state, e)
        if c in ns.in_connectors:
            ns.remove_in_connector(c)
        if c != conn and c in inner.arrays:
            inner.remove_data(c, validate=False)
    _set_wcr(state, write, op)
    return True


def _data_in(st: SDFGState, n) -> set:
    return {e.data.data for e in st.all_edges(n) if not e.data.is_empty()}


def accumulations_to_wcr(sdfg: SDFG, *, dry_run: bool = False) -> int:
    """Rewrite the recognised accumulations of every top-level map; returns how many writes changed
    (``dry_run``: 1 if one would, ``sdfg`` left as it is)."""
    changed = 0
    for state in dc.all_states(sdfg):
        for entry in [n for n in dc.top_level_nodes(state) if isinstance(n, nodes.MapEntry)]:
            exit_ = state.exit_node(entry)
            params = set(entry.map.params)
            for w in list(state.in_edges(exit_)):
                if w.data.is_empty() or w.data.wcr is not None or w.data.data is None:
                    continue
                if params <= {str(x) for x in w.data.subset.free_symbols}:
                    continue          # every iteration writes its own element: nothing to combine
                if isinstance(w.src, nodes.NestedSDFG) and state.entry_node(w.src) is entry:
                    changed += _nested(state, w.src, w, dry_run)
                else:
                    changed += _direct(state, entry, w, dry_run)
                if dry_run and changed:
                    return 1
    return changed


class AccumulationToWCR(ppl.Pass):
    """The DaCe pass form of ``accumulations_to_wcr`` (returns the number of writes rewritten)."""

    CATEGORY = "distsdfg"

    def modifies(self) -> ppl.Modifies:
        return ppl.Modifies.Memlets | ppl.Modifies.Tasklets | ppl.Modifies.Edges

    def should_reapply(self, modified: ppl.Modifies) -> bool:
        return False

    def apply_pass(self, sdfg: SDFG, _) -> Optional[int]:
        return accumulations_to_wcr(sdfg) or None
