"""One rank: copies between whole local buffers become views (step of ``optimize_lowered``).

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

__all__ = ["copies_to_views"]


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
    return len(box) == len(layout.local_shape) and all(
        _is_zero(s) and _eq(f"({e}) + 1", n) for (s, e), n in zip(box, layout.local_shape))


def _row_major(desc) -> bool:
    from ..geometry.boxes import row_major_strides
    from .optimize import _same
    return all(_is_zero(o) for o in desc.offset) and _same(desc.strides, row_major_strides(list(desc.shape)))


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
        return all(_is_zero(o) for o in spec.origin) and all(
            _is_zero(lo) and _eq(f"({hi}) + 1", n) for (lo, hi), n in zip(spec.boxes[0], a.shape))
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
