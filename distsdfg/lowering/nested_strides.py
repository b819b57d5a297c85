"""Keep a nested SDFG's view of an array in step with the buffer the lowering gives it.

A nested SDFG (e.g. the body of a loop DaCe turned into a map) declares its own descriptor for
each array it reaches through a connector, with the *shape and strides of the outer array*: DaCe
passes only a pointer. When the lowering points a kernel at a rank's local buffer (a block of the
array, so smaller strides), the nested descriptor, and every view of it inside, must take the
buffer's strides, or the body indexes past the buffer (NPBench's conv2d: a heap overwrite and a
segmentation fault). The nested descriptor takes the buffer's shape too, in the dimensions where
it had the array's: DaCe 2.0 validates that a connector's descriptor, in the caller's symbols, is
the one connected to it.

``restride_nested(state, edge, old, new)`` does that for one connector edge: each stride inside
that equals one of the old array's strides becomes the buffer's stride of that dimension; views
of the descriptor inside and deeper nested SDFGs follow. A stride that matches none is refused
by name (an ``UnsupportedProgramError``), never left to index out of bounds.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import dace
import sympy
from dace import data as dt
from dace import symbolic
from dace.sdfg import SDFG, nodes

from ..errors import UnsupportedProgramError

__all__ = ["restride_nested", "restride_into", "reshape_nested"]


def _sym(x):
    return symbolic.pystr_to_symbolic(str(x))


def _equal(a, b) -> bool:
    try:
        return symbolic.simplify(_sym(a) - _sym(b)) == 0
    except Exception:       # an expression sympy cannot subtract: compare the text
        return str(a) == str(b)


def _renamed(exprs: Sequence, mapping: Dict[str, object]) -> List:
    """``exprs`` (inner symbols) in the outer SDFG's symbols, through a symbol mapping."""
    sub = {sympy.Symbol(k): _sym(v) for k, v in mapping.items()}
    return [_sym(e).subs(sub, simultaneous=True) if sub else _sym(e) for e in exprs]


def _match(strides: Sequence, old: Sequence, new: Sequence, what: str) -> List:
    """Each of ``strides`` that equals an ``old`` stride becomes the ``new`` one of that dimension
    (one already equal to a ``new`` stride stays: a second pass changes nothing)."""
    out = []
    for s in strides:
        hit = next((n for o, n in zip(old, new) if _equal(s, o)), None)
        if hit is None and any(_equal(s, n) for n in new):
            hit = s
        if hit is None:
            raise UnsupportedProgramError(
                f"{what} has stride {s}, which is none of the strides {tuple(old)} of the array it stands for: "
                f"distsdfg cannot point it at a rank's local buffer (strides {tuple(new)}); run this kernel "
                f"whole (its map unsplit)")
        out.append(hit)
    return out


def _restride(sdfg: SDFG, name: str, old: Sequence, new: Sequence, what: str, seen: set) -> None:
    """Give ``sdfg.arrays[name]`` (whose strides are in terms of ``old``) the matching ``new``
    strides, then the views of it and the nested SDFGs it is passed to."""
    if (id(sdfg), name) in seen:
        return
    seen.add((id(sdfg), name))
    desc = sdfg.arrays[name]
    before = list(desc.strides)
    after = _match(before, old, new, what)
    if all(_equal(a, b) for a, b in zip(before, after)):
        return
    desc.strides = tuple(after)
    for st in sdfg.states():
        for an in st.data_nodes():
            if an.data != name:
                continue
            for e in st.all_edges(an):
                other = e.dst if e.src is an else e.src
                if isinstance(other, nodes.AccessNode) and isinstance(sdfg.arrays[other.data], dt.View):
                    _restride(sdfg, other.data, before, after, f"view `{other.data}` of `{name}` in {sdfg.name}",
                              seen)
                elif isinstance(other, nodes.NestedSDFG):
                    conn = e.dst_conn if e.dst is other else e.src_conn
                    _into(other, conn, before, after, seen)


def _into(nsdfg: nodes.NestedSDFG, conn: str, old: Sequence, new: Sequence, seen: set) -> None:
    """Restride connector ``conn`` of ``nsdfg``: ``old`` and ``new`` are in the parent's symbols."""
    inner = nsdfg.sdfg
    if conn not in inner.arrays:
        return
    _pass_symbols(nsdfg, conn, new, "strides")
    desc = inner.arrays[conn]
    # compared in the parent's symbols; the new strides use the parent's names, which the mapping
    # above makes the same inside
    what = f"`{conn}` in nested SDFG {inner.name}"
    pick = _match(_renamed(desc.strides, nsdfg.symbol_mapping), old, new, what)
    _restride(inner, conn, list(desc.strides), pick, what, seen)


def _pass_symbols(nsdfg: nodes.NestedSDFG, conn: str, exprs: Sequence, what: str) -> None:
    """The parent's symbols that ``exprs`` use reach the nested SDFG under their own names."""
    inner = nsdfg.sdfg
    for s in sorted({str(x) for e in exprs for x in _sym(e).free_symbols}):
        have = nsdfg.symbol_mapping.get(s)
        if have is None:
            nsdfg.symbol_mapping[s] = _sym(s)
            if s not in inner.symbols:
                inner.add_symbol(s, dace.int64)
        elif not _equal(have, s):
            raise UnsupportedProgramError(
                f"nested SDFG {inner.name}: its symbol `{s}` stands for {have}, but the local buffer passed as "
                f"`{conn}` needs the outer `{s}` in its {what}; run this kernel whole (its map unsplit)")


def reshape_nested(nsdfg: nodes.NestedSDFG, conn: str, old: Sequence, new: Sequence,
                   offset: Sequence = ()) -> None:
    """The lowering passed a buffer of shape ``new`` where the array of shape ``old`` was passed to
    connector ``conn`` of ``nsdfg``: each dimension of the nested descriptor that has the array's
    extent takes the buffer's, and the buffer's ``offset`` (the buffer holds a block and is indexed
    with the array's indices), and so on into the nested SDFGs it passes the whole array to."""
    inner = nsdfg.sdfg
    desc = inner.arrays.get(conn)
    if (not isinstance(desc, dt.Array) or isinstance(desc, dt.View) or len(old) != len(new)
            or len(desc.shape) != len(old) or all(_equal(a, b) for a, b in zip(old, new))):
        return
    seen = _renamed(desc.shape, nsdfg.symbol_mapping)
    if not all(_equal(s, o) for s, o in zip(seen, old)):
        return                      # the callee sees a part of the array: DaCe passes that part
    offset = tuple(offset) or tuple(0 for _ in new)
    _pass_symbols(nsdfg, conn, list(new) + list(offset), "shape")
    before = tuple(desc.shape)
    shape = tuple(new)
    if _equal(desc.total_size, sympy.prod([_sym(d) for d in before])):
        desc.total_size = sympy.prod([_sym(d) for d in shape])
    desc.shape = shape
    if any(not _equal(o, 0) for o in offset) and all(_equal(o, 0) for o in desc.offset):
        desc.offset = list(offset)
    for st in inner.all_states():
        for node in st.nodes():
            if not isinstance(node, nodes.NestedSDFG):
                continue
            for e in st.in_edges(node):
                if e.data.data == conn and e.dst_conn is not None:
                    reshape_nested(node, e.dst_conn, before, shape, desc.offset)
            for e in st.out_edges(node):
                if e.data.data == conn and e.src_conn is not None:
                    reshape_nested(node, e.src_conn, before, shape, desc.offset)


def restride_nested(nsdfg: nodes.NestedSDFG, conn: str, old: Sequence, new: Sequence) -> None:
    """The lowering passed the buffer with strides ``new`` where the array with strides ``old`` was
    passed to connector ``conn`` of ``nsdfg``: update the nested descriptors to match."""
    if len(old) != len(new) or all(_equal(a, b) for a, b in zip(old, new)):
        return
    _into(nsdfg, conn, list(old), list(new), set())


def restride_into(edge, old_desc, new_desc) -> None:
    """``edge`` (in a map's scope) now carries ``new_desc``'s buffer where it carried ``old_desc``'s
    array: when it enters or leaves a nested SDFG, restride that side."""
    for n, conn in ((edge.dst, edge.dst_conn), (edge.src, edge.src_conn)):
        if isinstance(n, nodes.NestedSDFG) and conn is not None and isinstance(new_desc, dt.Array):
            reshape_nested(n, conn, old_desc.shape, new_desc.shape, new_desc.offset)
            restride_nested(n, conn, old_desc.strides, new_desc.strides)
