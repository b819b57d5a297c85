"""One rank: copies between whole local buffers become views, and other one-rank rewrites
(step 6b of ``optimize_lowered``: ``copies_to_views``, ``sums_into_products``,
``fills_to_assignments``, ``drop_dead_writes``).

With ``lower(sdfg, ..., nprocs=1)`` every block is a whole array, and the lowering still joins
kernels whose buffers differ in shape with a ``redist`` step (a batched product reads the
attention scores ``(B, H, S, S)`` as ``(B*H, S, S)``; a reduction's ``(B, H, S)`` result is read as
``(B, H, S, 1)``), and scatters an input into a buffer that several states read. Each such step is
a copy of one contiguous buffer into another of the same element order. ``copies_to_views``
removes it and makes the destination a DaCe View of the source: the consumers read the producer's
memory (no copy, no second buffer).

Only where no value can change: the destination is written by the step alone, the source is not
written after the step (an input the program never writes, or a buffer whose every write comes
before the step in program order), both are row-major, start at index zero and have as many
elements, and both layouts cover their whole buffer (no partial results, homes or clipping).
"""
from __future__ import annotations

from typing import Dict, List, Optional

from dace import data as dt
from dace import memlet as mm
from dace import subsets
from dace.sdfg import SDFG, nodes
from ..values.exprs import box_covers

__all__ = ["copies_to_views", "fills_to_assignments", "drop_dead_writes", "sums_into_products"]


def _n(x) -> Optional[int]:
    try:
        return int(str(x))
    except ValueError:
        return None


def _eq(a, b) -> bool:
    """Two size expressions (strings or symbolic; a size symbol may be called ``S``) provably equal."""
    from dace import symbolic
    from ..values.exprs import same_value
    return same_value(symbolic.pystr_to_symbolic(str(a)), symbolic.pystr_to_symbolic(str(b)))


def _is_zero(x) -> bool:
    return str(x).strip() == "0"


def _whole(layout) -> bool:
    """A layout (``plan.Layout``) of one block that is the whole local buffer, indexed from zero."""
    if (layout is None or layout.op or layout.home or layout.clip or len(layout.boxes) != 1
            or any(g != 1 for g in layout.grid) or not all(_is_zero(o) for o in layout.origin)):
        return False
    box = layout.boxes[0]
    return len(box) == len(layout.local_shape) and box_covers(box, layout.local_shape)


def _row_major(desc) -> bool:
    from ..geometry.boxes import row_major_strides
    want = row_major_strides(list(desc.shape))
    return (all(_is_zero(o) for o in desc.offset) and len(want) == len(desc.strides)
            and all(_eq(a, b) for a, b in zip(desc.strides, want)))


def _same_size(a, b) -> bool:
    return _eq(a.total_size, b.total_size)


def _order(sdfg: SDFG):
    """States in program order (None unless the program is one straight chain of states)."""
    from .. import dace_compat as dc
    segments, linear = dc.program_segments(sdfg)
    return segments[0] if linear and len(segments) == 1 else None


def copies_to_views(sdfg: SDFG, low) -> int:
    """Replace whole-buffer copy steps of a one-rank program by views; returns how many."""
    from ..mpi import DistributedMemlet
    order = _order(sdfg)
    if order is None or low.nprocs != 1:
        return 0
    rank = {id(st): i for i, st in enumerate(order)}
    specs = {s.index: s for s in low.steps}
    removed = 0
    for st in order:
        for node in [n for n in st.nodes() if isinstance(n, DistributedMemlet)]:
            spec = specs.get(node.step)
            if spec is None or node not in st.nodes():
                continue
            ins = [e for e in st.in_edges(node) if e.dst_conn == "_in"]
            outs = [e for e in st.out_edges(node) if e.src_conn == "_out"]
            if len(ins) != 1 or len(outs) != 1:
                continue
            src, dst = ins[0].src, outs[0].dst
            if not (isinstance(src, nodes.AccessNode) and isinstance(dst, nodes.AccessNode)) or src.data == dst.data:
                continue
            if not _copy_step(sdfg, spec, src.data, dst.data):
                continue
            if not _safe(sdfg, order, rank, st, node, src.data, dst.data):
                continue
            _to_view(sdfg, order, st, node, src, dst)
            removed += 1
    return removed


def _copy_step(sdfg: SDFG, spec, s: str, d: str) -> bool:
    """Whether ``spec`` copies all of buffer ``s`` into all of ``d`` in element order."""
    if getattr(spec, "acc", False) or getattr(spec, "inplace", False):
        return False
    a, b = sdfg.arrays[s], sdfg.arrays[d]
    if (type(a) is not dt.Array or type(b) is not dt.Array or not b.transient or a.dtype != b.dtype
            or a.storage != b.storage or not _row_major(a) or not _row_major(b) or not _same_size(a, b)):
        return False
    if spec.kind == "redist":
        return spec.source is not None and _whole(spec.source) and _whole(spec.layout)
    if spec.kind == "scatter":
        if a.transient or any(g != 1 for g in spec.grid) or len(spec.boxes) != 1:
            return False
        return all(_is_zero(o) for o in spec.origin) and box_covers(spec.boxes[0], a.shape)
    return False


def _writers(sdfg: SDFG, name: str) -> List:
    """(state, access node) of every write of ``name`` (an access node with an incoming edge)."""
    return [(st, n) for st in sdfg.states() for n in st.data_nodes() if n.data == name and st.in_degree(n)]


def _safe(sdfg: SDFG, order, rank: Dict[int, int], st, step, s: str, d: str) -> bool:
    """``d`` is written by the step alone and ``s`` by nothing after it (nor inside nested SDFGs,
    which only see their connectors)."""
    target = [e.dst for e in st.out_edges(step) if e.src_conn == "_out"][0]
    if any(n is not target for _, n in _writers(sdfg, d)):
        return False
    here = rank[id(st)]
    for wst, n in _writers(sdfg, s):
        if rank.get(id(wst), -1) > here:
            return False
        if wst is st and n not in _ancestors(st, step):
            return False
    return True


def _ancestors(st, node) -> set:
    seen, todo = set(), [node]
    while todo:
        for e in st.in_edges(todo.pop()):
            if e.src not in seen:
                seen.add(e.src)
                todo.append(e.src)
    return seen


def _full(desc) -> subsets.Range:
    return subsets.Range([(0, s - 1, 1) for s in desc.shape])


def _to_view(sdfg: SDFG, order, st, step, src: nodes.AccessNode, dst: nodes.AccessNode) -> None:
    """Remove ``step``; ``dst``'s array becomes a view of ``src``'s, viewed from a ``src`` node next
    to every ``dst`` node (in the step's state, from the node the step read)."""
    s, d = src.data, dst.data
    feeds = [e.src for e in st.in_edges(step) if e.dst_conn in ("_plan", "_comm")]
    st.remove_node(step)
    for n in feeds:
        if n in st.nodes() and st.degree(n) == 0:
            st.remove_node(n)
    old = sdfg.arrays[d]
    sdfg.remove_data(d, validate=False)
    sdfg.add_view(d, old.shape, old.dtype, storage=old.storage, strides=old.strides, find_new_name=False)
    sd = sdfg.arrays[s]
    for state in order:
        for n in [n for n in state.data_nodes() if n.data == d]:
            viewed = src if state is st else state.add_access(s)
            m = mm.Memlet(data=s, subset=_full(sd), other_subset=_full(old))
            state.add_edge(viewed, None, n, "views", m)


def fills_to_assignments(sdfg: SDFG, low) -> int:
    """A one-rank ``fill`` step (zeros) whose buffer is then only added into, once per element, by one
    map (the contraction rewrite's ``out += product``: ``dace_compat.einsum``) is dropped and the
    map assigns instead of adding: one pass over the buffer instead of two. Returns how many."""
    from ..mpi import DistributedMemlet
    if low.nprocs != 1 or _order(sdfg) is None:
        return 0
    specs = {s.index: s for s in low.steps}
    done = 0
    for st in sdfg.states():
        for node in [n for n in st.nodes() if isinstance(n, DistributedMemlet)]:
            spec = specs.get(node.step)
            if spec is None or spec.kind != "fill" or spec.op != "sum" or getattr(spec, "acc", False):
                continue
            outs = [e for e in st.out_edges(node) if e.src_conn == "_out"]
            if len(outs) != 1 or not isinstance(outs[0].dst, nodes.AccessNode):
                continue
            filled = outs[0].dst
            plan = _single_adder(sdfg, st, filled)
            if plan is None:
                continue
            entry, exit_edges = plan
            feeds = [e.src for e in st.in_edges(node) if e.dst_conn in ("_plan", "_comm")]
            st.remove_node(node)
            st.remove_node(filled)
            for n in feeds:
                if n in st.nodes() and st.degree(n) == 0:
                    st.remove_node(n)
            for e in exit_edges:
                e.data.wcr = None
                e.data.wcr_nonatomic = False
            done += 1
    return done


def _single_adder(sdfg: SDFG, st, filled: nodes.AccessNode):
    """(map entry, its WCR edges into ``filled``'s array) when ``filled`` (the fill's output) only
    orders one top-level map that adds into the whole array once per element and is the array's
    only other writer; else None."""
    name = filled.data
    if any(e.data.data is not None for e in st.out_edges(filled)) or st.in_degree(filled) != 1:
        return None
    entries = [e.dst for e in st.out_edges(filled)]
    if len(entries) != 1 or not isinstance(entries[0], nodes.MapEntry) or st.entry_node(entries[0]) is not None:
        return None
    entry = entries[0]
    exit_ = st.exit_node(entry)
    writers = _writers(sdfg, name)
    outs = [e for e in st.out_edges(exit_) if e.data.data == name]
    if len(writers) != 2 or len(outs) != 1 or {id(n) for _, n in writers} != {id(filled), id(outs[0].dst)}:
        return None
    inner = [e for e in st.in_edges(exit_) if e.data.data == name]
    if len(inner) != 1 or not isinstance(inner[0].src, nodes.Tasklet):
        return None
    from dace.frontend.operations import detect_reduction_type
    from dace import dtypes
    if any(e.data.wcr is None or detect_reduction_type(e.data.wcr) != dtypes.ReductionType.Sum
           for e in inner + outs):
        return None
    # once per element: each dimension indexed by its own parameter, over the whole extent
    desc = sdfg.arrays[name]
    params = dict(zip(entry.map.params, entry.map.range.ranges))
    used = []
    for (b, e, s), n in zip(inner[0].data.subset.ranges, desc.shape):
        p = str(b)
        if str(e) != p or p not in params or p in used:
            return None
        lo, hi, step = params[p]
        if not (_is_zero(lo) and _eq(f"({hi}) + 1", n) and str(step) == "1"):
            return None
        used.append(p)
    if len(used) != len(entry.map.params) or len(desc.shape) != len(inner[0].data.subset.ranges):
        return None
    if not desc.transient:
        return None
    return entry, inner + outs


def drop_dead_writes(sdfg: SDFG) -> int:
    """Remove top-level maps of a one-rank program whose every output is a transient array that
    nothing reads (the contraction rewrite leaves the original einsum's zeroing map behind when its
    output became the product's buffer); returns how many."""
    if _order(sdfg) is None:
        return 0
    read = set()
    for st in sdfg.states():
        for n in st.data_nodes():
            if st.out_degree(n):
                read.add(n.data)
    for e in sdfg.all_interstate_edges() if hasattr(sdfg, "all_interstate_edges") else sdfg.edges():
        read |= set(e.data.free_symbols)
    removed = 0
    for st in sdfg.states():
        for entry in [n for n in st.nodes() if isinstance(n, nodes.MapEntry) and st.entry_node(n) is None]:
            exit_ = st.exit_node(entry)
            outs = st.out_edges(exit_)
            targets = [e.dst for e in outs]
            if not outs or not all(
                    isinstance(t, nodes.AccessNode) and type(sdfg.arrays[t.data]) is dt.Array
                    and sdfg.arrays[t.data].transient and t.data not in read and st.out_degree(t) == 0
                    for t in targets):
                continue
            if any(isinstance(n, (nodes.NestedSDFG, nodes.LibraryNode)) for n in st.scope_subgraph(entry).nodes()):
                continue
            sources = [e.src for e in st.in_edges(entry)]
            for n in list(st.scope_subgraph(entry).nodes()):
                st.remove_node(n)
            for n in targets + sources:
                if n in st.nodes() and st.degree(n) == 0:
                    st.remove_node(n)
            removed += 1
    for name in [k for k, d in sdfg.arrays.items() if d.transient and type(d) is dt.Array]:
        if not any(n.data == name for st in sdfg.states() for n in st.data_nodes()):
            sdfg.remove_data(name, validate=False)
    return removed


def sums_into_products(sdfg: SDFG, low) -> int:
    """``out = P1 + P2`` where ``P1`` and ``P2`` are whole matrix products (``MatMul`` nodes) that
    nothing else reads (the matrix chain ``(A @ B) + (C @ (D @ E))``): the first product is written
    into ``out`` and the second adds into it (GEMM with ``beta = 1``); the add map and both
    temporaries go. One rank only (every block is the whole array). Returns how many."""
    from dace.libraries.blas import MatMul
    if low.nprocs != 1 or _order(sdfg) is None:
        return 0
    reads: Dict[str, int] = {}
    for st in sdfg.states():
        for n in st.data_nodes():
            reads[n.data] = reads.get(n.data, 0) + st.out_degree(n)
    done = 0
    for st in sdfg.states():
        for entry in [n for n in st.nodes() if isinstance(n, nodes.MapEntry) and st.entry_node(n) is None]:
            found = _sum_of_products(sdfg, st, entry, reads, MatMul)
            if found is None:
                continue
            (p1, t1), (p2, t2), out_edge = found
            o = out_edge.dst.data
            full = _full(sdfg.arrays[o])
            first = st.add_access(o)
            e1 = st.out_edges(p1)[0]
            st.add_edge(p1, e1.src_conn, first, None, mm.Memlet(data=o, subset=full))
            e2 = st.out_edges(p2)[0]
            st.add_edge(p2, e2.src_conn, out_edge.dst, None, mm.Memlet(data=o, subset=full))
            p2.add_in_connector("_cin")
            p2.beta = 1
            st.add_edge(first, None, p2, "_cin", mm.Memlet(data=o, subset=full))
            for n in list(st.scope_subgraph(entry).nodes()) + [t1, t2]:
                st.remove_node(n)
            for name in (t1.data, t2.data):
                if not any(n.data == name for s in sdfg.states() for n in s.data_nodes()):
                    sdfg.remove_data(name, validate=False)
            done += 1
    return done


def _sum_of_products(sdfg: SDFG, st, entry: nodes.MapEntry, reads, MatMul):
    """((product node, its result node) twice, the map's output edge) when ``entry``'s map is
    ``out[i, j] = t1[i, j] + t2[i, j]`` over all of three equal row-major 2-D arrays, ``t1`` and
    ``t2`` transients written by a ``MatMul`` alone and read by this map alone."""
    exit_ = st.exit_node(entry)
    inner = st.scope_subgraph(entry, include_entry=False, include_exit=False).nodes()
    if len(inner) != 1 or not isinstance(inner[0], nodes.Tasklet):
        return None
    task = inner[0]
    code = task.code.as_string.replace(" ", "")
    if code not in ("__out=(__in1+__in2)", "__out=__in1+__in2") or set(task.in_connectors) != {"__in1", "__in2"}:
        return None
    outs = st.out_edges(exit_)
    if len(outs) != 1 or not isinstance(outs[0].dst, nodes.AccessNode) or outs[0].data.wcr is not None:
        return None
    o = outs[0].dst.data
    od = sdfg.arrays[o]
    if type(od) is not dt.Array or len(od.shape) != 2 or not _row_major(od):
        return None
    if _writers(sdfg, o) != [(st, outs[0].dst)]:
        return None
    params = entry.map.params
    for p, (lo, hi, step), n in zip(params, entry.map.range.ranges, od.shape):
        if not (_is_zero(lo) and _eq(f"({hi}) + 1", n) and str(step) == "1"):
            return None
    idx = [str(p) for p in params]
    pairs = []
    for conn in ("__in1", "__in2"):
        e = [x for x in st.in_edges(task) if x.dst_conn == conn][0]
        if [str(b) for b, _, _ in e.data.subset.ranges] != idx or e.data.subset.num_elements() != 1:
            return None
        src = st.memlet_path(e)[0].src
        if not isinstance(src, nodes.AccessNode) or reads.get(src.data) != 1:
            return None
        d = sdfg.arrays[src.data]
        if (type(d) is not dt.Array or not d.transient or d.dtype != od.dtype or not _row_major(d)
                or len(d.shape) != 2 or not all(_eq(a, b) for a, b in zip(d.shape, od.shape))):
            return None
        ins = st.in_edges(src)
        if len(ins) != 1 or not isinstance(ins[0].src, MatMul) or _writers(sdfg, src.data) != [(st, src)]:
            return None
        prod = ins[0].src
        if len(st.out_edges(prod)) != 1 or ins[0].data.wcr is not None or "_cin" in prod.in_connectors \
                or not _eq(prod.beta, 0) or prod in [p for p, _ in pairs]:
            return None
        pairs.append((prod, src))
    ew = [x for x in st.in_edges(exit_)]
    if len(ew) != 1 or [str(b) for b, _, _ in ew[0].data.subset.ranges] != idx:
        return None
    return pairs[0], pairs[1], outs[0]
