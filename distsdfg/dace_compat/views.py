"""Adapter (DaCe 1.0.2): strided views of whole arrays become a permuting copy plus a reshape view.

DaCe gives a library node a transposed operand as a *strided view* of the whole array: the
thesis' attention scores ``np.einsum('bhik,bhjk->bhij', Q, K)`` read ``K`` of shape
``(B, H, S, EH)`` through a view of shape ``(B*H, EH, S)`` with strides ``(S*EH, 1, EH)``.
Such a view is no reshape of ``K``, so the lowering would take ``K`` through rank 0.

``transposed_views_to_copies`` rewrites every such view that is read (never written) and
whose dimensions are groups of the array's dimensions in some order: a map copies the array
into a fresh transient in the permuted order (``K[b, h, s, e]`` into ``K_perm[b, h, e, s]``), and
the view becomes a row-major view of that transient, i.e. a reshape view. The copy is a kernel
like any other (its blocks move between ranks as any map's do: a head-split ``K`` copies
locally), the library node reads the same values as before. Views it cannot express
(slices, offsets, overlapping strides) are left alone.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import sympy
from dace import data as dt
from dace import memlet as mm
from dace.sdfg import SDFG, nodes

from ..geometry.boxes import row_major_strides
from . import all_states

__all__ = ["transposed_views_to_copies", "view_permutation", "stepped_views"]

#: Label of the copy maps: their schedule keys are ``permute_<array>_map``.
COPY_LABEL = "permute_{}"


def _eq(a, b) -> bool:
    return sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0


def view_permutation(ashape: Sequence, vshape: Sequence, vstrides: Sequence) -> Optional[Tuple[int, ...]]:
    """The order of the array's dimensions (row-major array of ``ashape``) in which a view of
    shape ``vshape`` and strides ``vstrides`` is a row-major reshape of the permuted array, or
    None. Each view dimension must cover consecutive array dimensions (outer to inner)."""
    astr = row_major_strides(list(ashape))
    used: set = set()
    order: List[int] = []
    for n, s in zip(vshape, vstrides):
        if _eq(n, 1):
            continue
        group, size, stride = [], sympy.Integer(1), s
        while not _eq(size, n):
            hit = [d for d in range(len(ashape)) if d not in used and d not in group and not _eq(ashape[d], 1)
                   and _eq(astr[d], stride)]
            if len(hit) != 1:
                return None
            group.insert(0, hit[0])
            size = size * sympy.sympify(ashape[hit[0]])
            stride = stride * sympy.sympify(ashape[hit[0]])
            if len(group) > len(ashape):
                return None
        used |= set(group)
        order += group
    rest = [d for d in range(len(ashape)) if d not in used]
    if any(not _eq(ashape[d], 1) for d in rest):
        return None
    order = rest + order
    return tuple(order) if order != list(range(len(ashape))) else None


def transposed_views_to_copies(sdfg: SDFG, *, dry_run: bool = False) -> int:
    """Rewrite the read-only strided views of whole arrays described above; returns how many
    (``dry_run``: 1 if one would be rewritten, ``sdfg`` left as it is)."""
    done = 0
    uses: dict = {}
    for state in all_states(sdfg):
        for n in state.data_nodes():
            uses[n.data] = uses.get(n.data, 0) + 1
    for state in all_states(sdfg):
        for vnode in list(state.data_nodes()):
            vdesc = sdfg.arrays.get(vnode.data)
            if not isinstance(vdesc, dt.View) or state.entry_node(vnode) is not None or uses[vnode.data] != 1:
                continue        # (a view with several access nodes keeps its strides: one may be written)
            ins, outs = state.in_edges(vnode), state.out_edges(vnode)
            if len(ins) != 1 or not outs or any(isinstance(e.dst, nodes.AccessNode) for e in outs):
                continue
            src = ins[0].src
            if not isinstance(src, nodes.AccessNode) or type(sdfg.arrays[src.data]) is not dt.Array:
                continue
            adesc = sdfg.arrays[src.data]
            sub = ins[0].data.subset if ins[0].data.data == src.data else ins[0].data.other_subset
            if sub is None or any(not _eq(a, b) for a, b in zip(sub.size(), adesc.shape)) or any(
                    not _eq(o, 0) for o in (vdesc.offset or [])) or any(not _eq(o, 0) for o in sub.min_element()):
                continue
            if not all(_eq(a, b) for a, b in zip(adesc.strides, row_major_strides(list(adesc.shape)))):
                continue
            if all(_eq(a, b) for a, b in zip(vdesc.strides, row_major_strides(list(vdesc.shape)))):
                continue        # already a reshape view
            perm = view_permutation(adesc.shape, vdesc.shape, vdesc.strides)
            if perm is None:
                continue
            if dry_run:
                return 1
            _rewrite(sdfg, state, src, vnode, ins[0], perm)
            done += 1
    return done


def _rewrite(sdfg: SDFG, state, src, vnode, edge, perm) -> None:
    adesc, vdesc = sdfg.arrays[src.data], sdfg.arrays[vnode.data]
    tshape = [adesc.shape[d] for d in perm]
    tname, _ = sdfg.add_array(f"{src.data}_perm", tshape, adesc.dtype, transient=True, find_new_name=True)
    params = [f"__p{d}" for d in range(len(adesc.shape))]
    tnode = state.add_access(tname)
    state.add_mapped_tasklet(
        COPY_LABEL.format(src.data), {p: f"0:{n}" for p, n in zip(params, adesc.shape)},
        {"__inp": mm.Memlet(f"{src.data}[{', '.join(params)}]")}, "__out = __inp",
        {"__out": mm.Memlet(f"{tname}[{', '.join(params[d] for d in perm)}]")},
        external_edges=True, input_nodes={src.data: src}, output_nodes={tname: tnode})
    state.remove_edge(edge)
    vdesc.strides = tuple(row_major_strides(list(vdesc.shape)))
    vdesc.total_size = sdfg.arrays[tname].total_size
    full = ", ".join(f"0:{n}" for n in tshape)
    vfull = ", ".join(f"0:{n}" for n in vdesc.shape)
    state.add_edge(tnode, None, vnode, "views", mm.Memlet(data=tname, subset=full, other_subset=vfull))




def stepped_views(sdfg: SDFG) -> List[Tuple[str, str, str]]:
    """Stepped slices (``x[::2]``, ``A[1::3, :]``) as DaCe 1.0.2 parses them, wrong with DaCe alone too:
    ``(array, where, what)`` for each.

    * a view of one, read by a library node (``A[::2, :] @ p``), keeps the array's strides;
    * an element-wise operation on one reads ``x[__i0:2]`` in its map (the step taken as an end):
      one element per iteration, but the range of an index and a step."""
    out = []
    for sd in sdfg.all_sdfgs_recursive():
        for st in sd.states():
            for node in st.nodes():
                if isinstance(node, nodes.Tasklet):
                    for e in list(st.in_edges(node)) + list(st.out_edges(node)):
                        m = e.data
                        if m.is_empty() or m.dynamic or not hasattr(m.subset, "ranges") or m.volume != 1:
                            continue
                        if any(sympy.sympify(k) != 1 or (b != en and not _eq(b, en)) for b, en, k in m.subset.ranges):
                            out.append((m.data, f"map around `{node.label}`", str(m.subset)))
                    continue
                desc = sd.arrays.get(node.data) if isinstance(node, nodes.AccessNode) else None
                if not isinstance(desc, dt.View):
                    continue
                for e in st.all_edges(node):
                    other = e.src if e.dst is node else e.dst
                    if not isinstance(other, nodes.AccessNode) or isinstance(sd.arrays.get(other.data), dt.View):
                        continue
                    sub = e.data.subset if e.data.data == other.data else e.data.other_subset
                    if hasattr(sub, "ranges") and any(sympy.sympify(s) != 1 for _, _, s in sub.ranges):
                        out.append((other.data, f"view `{node.data}`", str(sub)))
                        break
    return out
