"""Independent for-loops become maps, so that their iterations can be split over ranks.

A triangular loop such as ``for i in range(N): C[i, :i + 1] *= beta`` has inner maps whose
ranges depend on ``i``: their blocks cannot be planned before the call. When the iterations of
the loop are independent, the loop itself is a map over ``i`` whose range does not depend on
anything set at run time; DaCe's ``LoopToMap`` turns it into one (the body becomes a nested
SDFG), and the planner then splits the rows (the loop-invariant dimension), each rank running
its own iterations with their triangular inner ranges unchanged.

DaCe 1.0.2's own applicability test refuses these loops (it does not match the loop variable
in subsets such as ``B[i, 0:i]``), so the test here is ours and deliberately narrow:

* every array the body writes that lives outside the loop is accessed, in every read and every
  write of the body, at exactly index ``i`` of one common dimension (distinct iterations touch
  disjoint slices); no interstate edge of the body reads it;
* a transient used only inside the body is written in the body before it is read (nothing is
  carried from one iteration to the next);
* no symbol assigned in the body is read before it is assigned, and neither the loop variable
  nor those symbols are read after the loop;
* the step is a positive constant;
* a map or library node of the body depends on the loop variable (otherwise its kernels are
  split as they are, e.g. a loop over bins with maps over the data).

Anything else (Cholesky's reads of earlier rows, covariance's mirrored ``cov[j, i]`` writes, a
sum carried across iterations) is left alone: such loops keep running their dependent maps
whole on rank 0.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set

import sympy
from dace import data as dt
from dace import symbolic
from dace.sdfg import SDFG, SDFGState, nodes

from .. import dace_compat as dc
from ..dace_compat import DetectLoop, LoopToMap

__all__ = ["independent_loops_to_maps", "loop_is_independent"]


def _point_dims(subset, var) -> Set[int]:
    """Dimensions in which ``subset`` is the single index ``var``."""
    out = set()
    try:
        ranges = subset.ndrange()
    except Exception:          # an index subset or an unknown one: no claim
        return out
    for d, (b, e, _) in enumerate(ranges):
        try:
            if sympy.simplify(symbolic.pystr_to_symbolic(str(b)) - var) == 0 and \
                    sympy.simplify(symbolic.pystr_to_symbolic(str(e)) - var) == 0:
                out.add(d)
        except Exception:
            pass
    return out


def _subsets(state: SDFGState, node: nodes.AccessNode):
    """(subset, is_write) for every edge at ``node`` (None where DaCe cannot say)."""
    for e in state.in_edges(node):
        if not e.data.is_empty():
            yield e.data.get_dst_subset(e, state), True
    for e in state.out_edges(node):
        if not e.data.is_empty():
            yield e.data.get_src_subset(e, state), False


def loop_is_independent(sdfg: SDFG, body: List[SDFGState], itervar: str) -> Optional[str]:
    """None when the iterations of the loop over ``itervar`` with states ``body`` are independent
    (by the rules of the module docstring), else why not."""
    var = symbolic.pystr_to_symbolic(itervar)
    body_set = set(body)
    outside: Set[str] = set()
    for st in sdfg.nodes():
        if st not in body_set:
            outside |= {n.data for n in st.data_nodes()}
    outside |= {name for name, desc in sdfg.arrays.items() if not desc.transient}
    access: Dict[str, list] = {}
    written: Set[str] = set()
    local_written: Set[str] = set()
    for st in body:
        for n in st.data_nodes():
            desc = sdfg.arrays[n.data]
            if n.data in outside:
                for sub, w in _subsets(st, n):
                    access.setdefault(n.data, []).append(sub)
                    if w:
                        written.add(n.data)
            elif not isinstance(desc, dt.View):
                reads = st.out_degree(n) > 0
                if reads and st.in_degree(n) == 0 and n.data not in local_written:
                    return f"transient `{n.data}` is read before the body writes it"
        for n in st.data_nodes():
            if st.in_degree(n) > 0:
                local_written.add(n.data)
    for name in written:
        common = None
        for sub in access[name]:
            if sub is None:
                return f"an access to `{name}` has no subset"
            dims = _point_dims(sub, var)
            common = dims if common is None else common & dims
        if not common:
            return f"`{name}` is written and not always indexed by `{itervar}` in one dimension"
    # Interstate edges of the body: no reads of written arrays, no symbol carried across iterations.
    assigned: Set[str] = set()
    for st in body:
        for e in sdfg.out_edges(st):
            for m in e.data.get_read_memlets(sdfg.arrays):
                if m.data in written:
                    return f"an interstate edge reads `{m.data}`, which the body writes"
            assigned |= set(e.data.assignments)
    used_before = set()
    for st in body:
        for e in sdfg.out_edges(st):
            used_before |= ({str(s) for s in e.data.read_symbols()} - assigned_before(sdfg, body, st) - {itervar})
    carried = used_before & (assigned - {itervar})
    if carried:
        return f"symbol(s) {sorted(carried)} carried from one iteration to the next"
    return None


def assigned_before(sdfg: SDFG, body: List[SDFGState], upto: SDFGState) -> Set[str]:
    """Symbols assigned on the out-edges of body states that come before ``upto`` in order."""
    out: Set[str] = set()
    for st in body:
        if st is upto:
            break
        for e in sdfg.out_edges(st):
            out |= set(e.data.assignments)
    return out


def _used_after(sdfg: SDFG, body: Set[SDFGState], guard, names: Set[str]) -> bool:
    """Whether a state or an interstate edge after the loop reads one of ``names`` before assigning
    it: a later loop that reuses the variable (``for i in range(N)`` twice, or inside a time loop)
    assigns it first and does not count. Without a guard state, any read anywhere else counts."""
    if guard is None:
        for st in sdfg.nodes():
            if st not in body and names & {str(s) for s in st.free_symbols}:
                return True
        return any(e.src not in body and names & {str(s) for s in e.data.read_symbols()} for e in sdfg.edges())
    # (the guard's exit edges are the loop's own: their condition reads the variable)
    todo = [(e, frozenset(names), True) for e in sdfg.out_edges(guard) if e.dst not in body]
    seen = set()
    while todo:
        e, live, own = todo.pop()
        if not own and live & {str(s) for s in e.data.read_symbols()}:
            return True
        live = live - set(e.data.assignments)
        st = e.dst
        if not live or (st, live) in seen:
            continue
        seen.add((st, live))
        if st in body or st is guard or live & {str(s) for s in st.free_symbols}:
            return True         # (the loop entered again without its initialisation: conservatively a use)
        todo.extend((o, live, False) for o in sdfg.out_edges(st))
    return False


class IndependentLoopToMap(LoopToMap):
    """``LoopToMap`` with the applicability test of ``loop_is_independent``."""

    def can_be_applied(self, graph, expr_index, sdfg, permissive=False):
        if not DetectLoop.can_be_applied(self, graph, expr_index, sdfg, permissive):
            return False
        if expr_index <= 1 and len(self.loop_guard.nodes()) != 0:
            return False
        found = self.loop_information()
        if not found:
            return False
        itervar, (start, end, step), _ = found
        if symbolic.contains_sympy_functions(start) or symbolic.contains_sympy_functions(end):
            return False
        try:
            if not (int(step) > 0):
                return False
        except (TypeError, ValueError):
            return False
        order = [s for s in _block_order(sdfg) if s in set(self.loop_body())]
        if any(not isinstance(s, SDFGState) for s in order):
            return False
        inner = {k for s in order for e in sdfg.out_edges(s) for k in e.data.assignments}
        if not _kernels_depend_on(sdfg, order, {itervar} | inner):
            return False      # its kernels can be split as they are (e.g. azint's maps over the data)
        if loop_is_independent(sdfg, order, itervar) is not None:
            return False
        guard = getattr(self, "loop_guard", None) if expr_index <= 1 else None
        return not _used_after(sdfg, set(order), guard, {itervar} | inner)

    def apply(self, graph, sdfg):
        # A one-state body takes DaCe's single-state path, which fails on temporaries between two
        # maps (their shapes depend on the loop variable); an empty second state makes it nest
        # the body as a nested SDFG, which handles them.
        body = self.loop_body()
        itervar = self.loop_information()[0]
        if len(body) == 1:
            sdfg.add_state_after(body[0], label=f"{body[0].label}_end")
        out = super().apply(graph, sdfg)
        for st in sdfg.nodes():
            for n in st.nodes():
                if isinstance(n, nodes.NestedSDFG) and isinstance(st.entry_node(n), nodes.MapEntry) \
                        and list(st.entry_node(n).map.params) == [itervar]:
                    left = set(n.out_connectors) - _refine_rows(st, n, itervar)
                    if left:        # independent_loops_to_maps tries on a copy: this loop stays a loop
                        raise ValueError(f"written arrays {sorted(left)} not refined to iteration `{itervar}`")
        return out


def _refine_rows(state: SDFGState, nsdfg: nodes.NestedSDFG, itervar: str) -> Set[str]:
    """Give the new map's nested SDFG exactly its iteration's slice of each array it accesses at
    index ``itervar`` in one dimension: DaCe propagates ``C[i, 0:i + 1]`` out of the body as
    ``C[0:i + 1, 0:i + 1]``, which makes the ranks' written blocks overlap. The outer memlets take
    ``[i]`` in that dimension and every memlet inside is shifted by ``-i`` there. Returns the
    names refined."""
    var = symbolic.pystr_to_symbolic(itervar)
    inner = nsdfg.sdfg
    refined: Set[str] = set()
    if str(nsdfg.symbol_mapping.get(itervar, "")) != itervar:
        return refined
    names = set(nsdfg.in_connectors) | set(nsdfg.out_connectors)
    for name in names:
        common = None
        for st in inner.nodes():
            for n in st.data_nodes():
                if n.data == name:
                    for sub, _ in _subsets(st, n):
                        dims = _point_dims(sub, var) if sub is not None else set()
                        common = dims if common is None else common & dims
        if not common:
            continue
        d = min(common)
        desc = inner.arrays[name]
        shift = [0] * len(desc.shape)
        shift[d] = var
        for st in inner.nodes():
            for e in st.edges():
                m = e.data
                if m.is_empty():
                    continue
                if m.data == name:
                    m.subset.offset(shift, negative=True)
                elif m.other_subset is not None and (
                        (isinstance(e.dst, nodes.AccessNode) and e.dst.data == name) or
                        (isinstance(e.src, nodes.AccessNode) and e.src.data == name)):
                    m.other_subset.offset(shift, negative=True)
        shape = list(desc.shape)
        shape[d] = 1
        desc.set_shape(shape, strides=desc.strides, total_size=desc.total_size)
        for e in list(state.in_edges(nsdfg)) + list(state.out_edges(nsdfg)):
            conn = e.dst_conn if e.dst is nsdfg else e.src_conn
            if conn != name:
                continue
            rng = list(e.data.subset.ranges)
            rng[d] = (var, var, 1)
            e.data.subset = type(e.data.subset)(rng)
            e.data.volume = e.data.subset.num_elements()
            e.data.dynamic = True
        refined.add(name)
    return refined


def _kernels_depend_on(sdfg: SDFG, body: List[SDFGState], names: Set[str]) -> bool:
    """Whether a map or library node of the body has a range or an access (through a view, too)
    that depends on ``names``: the kernels that would otherwise run whole on rank 0."""
    def uses(memlet) -> bool:
        return not memlet.is_empty() and memlet.subset is not None and \
            bool(names & {str(x) for x in memlet.subset.free_symbols})

    for st in body:
        sdict = st.scope_dict()
        for n in st.nodes():
            if sdict[n] is not None or not isinstance(n, (nodes.MapEntry, nodes.LibraryNode)):
                continue
            if isinstance(n, nodes.MapEntry) and names & {str(x) for x in n.map.range.free_symbols}:
                return True
            out = st.exit_node(n) if isinstance(n, nodes.MapEntry) else n
            edges = list(st.in_edges(n)) + list(st.out_edges(out))
            for e in list(edges):
                other = e.src if e.dst is n else e.dst
                if isinstance(other, nodes.AccessNode) and isinstance(sdfg.arrays[other.data], dt.View):
                    edges += list(st.in_edges(other)) + list(st.out_edges(other))
            if any(uses(e.data) for e in edges):
                return True
    return False


def _block_order(sdfg: SDFG):
    from dace.sdfg import utils as sdutil
    try:
        from dace.sdfg.analysis import cfg
        return list(cfg.blockorder_topological_sort(sdfg))
    except Exception:
        return list(sdutil.dfs_topological_sort(sdfg))


def independent_loops_to_maps(sdfg: SDFG, *, dry_run: bool = False) -> int:
    """Turn every for-loop whose iterations are independent into a map (tried on a copy first: a
    loop DaCe fails to turn is left as it is); returns how many were turned (``dry_run``: 1 if
    there is a loop to try, whether or not DaCe could turn it; ``sdfg`` left as it is)."""
    import copy
    if dry_run:
        return int(bool(dc.pattern_matches(sdfg, IndependentLoopToMap)))
    turned, k = 0, 0
    while True:
        if k >= len(dc.pattern_matches(sdfg, IndependentLoopToMap)):
            return turned            # (matching changes nothing: no copy when there is no loop to turn)
        trial = copy.deepcopy(sdfg)
        found = dc.pattern_matches(trial, IndependentLoopToMap)
        try:
            found[k].apply_pattern(trial)
            trial.validate()
        except Exception:       # DaCe could not turn this loop: keep it, try the next one
            k += 1
            continue
        dc.pattern_matches(sdfg, IndependentLoopToMap)[k].apply_pattern(sdfg)
        turned, k = turned + 1, 0
