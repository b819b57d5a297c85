"""Exact blocks for reads bounded by data: the CSR row pointer pattern, inspected at call time.

A map kernel like the CSR SpMV reads ``A_col[j]`` and ``A_val[j]`` for ``j`` in an inner map
``ptr[i] : ptr[i + 1]``, whose bounds are values of another input array. Memlet propagation can
only bound such a read by the whole array, so every rank would receive all of ``A_col`` and
``A_val``. Here (thesis: the fallback solver computes displacements at initialisation):

* ``recognise`` finds the pattern when the kernel is lowered: an inner map whose range in one
  dimension is ``ptr[i + c1] : ptr[i + c2]`` (both bounds fed to the map's dynamic connectors by
  single elements of a one-dimensional input array ``ptr``, ``i`` a parameter of the kernel's
  map), and arrays read only inside that map, only at ``[j]`` (``j`` the inner parameter). It
  returns a ``DataBounds`` record; ``apply`` gives those arrays per-rank blocks
  ``[lo, hi)`` and a local buffer that starts at ``lo``, all three symbols (``lo``/``hi`` per
  rank, the buffer length ``n`` the same on every rank).
* ``inspect`` computes the symbols' values from the actual ``ptr`` on rank 0 at every call: for
  each rank's rows, the smallest start and the largest end of its non-empty rows (for a CSR
  pointer, ``ptr[r0] .. ptr[r1]``). The values go into the symbol values the plan is solved with
  (per-rank values as arrays of length P), so the plan cache keys on them.
* ``complete`` fills in an upper bound (the whole array on every rank of the grid) where no data
  is at hand: a report or a layout for sizes only.

Anything that does not match exactly is left to the propagated (whole-array) blocks.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

import dace
import numpy as np
import sympy
from dace import subsets
from dace.sdfg import SDFG, nodes

from .. import dace_compat as dc
from ..analysis.constraints import KernelPlan
from ..errors import DistributedLoweringError, InputError
from ..values.exprs import evaluate, evaluate_many
from .homes import rank_symbol_values
from ..values.plan import axis_symbols
from ..values.modes import KernelKind

__all__ = ["DataBounds", "recognise", "apply", "inspect", "inspect_call", "complete", "inputs_of"]


@dataclasses.dataclass(frozen=True)
class DataBounds:
    """Arrays a kernel reads at ``[j]`` for ``j`` in ``ptr[i + c1] : ptr[i + c2]``, ``i`` over each
    rank's block ``rows`` (start, end inclusive; symbolic in the grid's rank symbols and sizes)."""
    kernel: int
    label: str
    pointer: str
    arrays: Tuple[str, ...]
    lengths: Tuple[str, ...]             # the arrays' extents (symbolic)
    pointer_length: str
    c1: int
    c2: int
    rows: Tuple[str, str]
    grid: Tuple[int, ...]
    rank_syms: Tuple[str, ...]           # per grid axis; '' for an unsplit one
    lo: str                              # per rank: the first element it needs
    hi: str                              # per rank: one past the last
    n: str                               # the local buffers' length (the largest hi - lo)


def _symbol(expr) -> Optional[str]:
    e = sympy.sympify(expr)
    return str(e) if isinstance(e, sympy.Symbol) else None


def _pointer_read(state, entry, conn: str, params) -> Optional[Tuple[str, str, int]]:
    """``(array, param, c)`` when ``conn`` of ``entry`` receives the one element ``array[param + c]``."""
    edges = [e for e in state.in_edges(entry) if e.dst_conn == conn]
    if len(edges) != 1 or edges[0].data.is_empty() or edges[0].data.dynamic:
        return None
    m = edges[0].data
    sub = subsets.Range.from_indices(m.subset) if isinstance(m.subset, subsets.Indices) else m.subset
    if not isinstance(sub, subsets.Range) or len(sub) != 1:
        return None
    b, e, s = sub.ranges[0]
    b = sympy.sympify(b)
    if not sympy.sympify(e - b) == 0:
        return None
    used = [p for p in params if dace.symbolic.pystr_to_symbolic(p) in b.free_symbols]
    if len(used) != 1:
        return None
    c = sympy.expand(b - dace.symbolic.pystr_to_symbolic(used[0]))
    if not c.is_Integer:
        return None
    return m.data, used[0], int(c)


def _inner_bounds(state, inner: nodes.MapEntry, params):
    """Per dimension of ``inner``'s range that is ``ptr[p + c1] : ptr[p + c2]``: (dim, ptr, p, c1, c2)."""
    out = []
    for d, (b, e, s) in enumerate(inner.map.range.ranges):
        start, stop = _symbol(b), _symbol(sympy.sympify(e) + 1)
        if start is None or stop is None or start not in inner.in_connectors or stop not in inner.in_connectors:
            continue
        lo, hi = _pointer_read(state, inner, start, params), _pointer_read(state, inner, stop, params)
        if lo is None or hi is None or lo[0] != hi[0] or lo[1] != hi[1]:
            continue
        out.append((d, lo[0], lo[1], lo[2], hi[2]))
    return out


def _written_anywhere(sdfg: SDFG, name: str) -> bool:
    return any(n.data == name and st.in_degree(n) > 0 for st in sdfg.states() for n in st.data_nodes())


def _reads_only_at(state, scope_nodes, entry, inner, arr: str, param: str) -> bool:
    """Every memlet of ``arr`` inside the kernel's map is the propagated one into ``inner`` or a
    read of the one element ``[param]`` by a node directly inside ``inner``."""
    psym = dace.symbolic.pystr_to_symbolic(param)
    found = False
    for e in state.edges():
        if e.data.is_empty() or e.data.data != arr:
            continue
        if e.src not in scope_nodes and e.dst not in scope_nodes:
            continue
        if e.src is entry and e.dst is inner:
            continue
        if e.src is not inner or state.entry_node(e.dst) is not inner:
            return False
        sub = e.data.subset
        sub = subsets.Range.from_indices(sub) if isinstance(sub, subsets.Indices) else sub
        if not isinstance(sub, subsets.Range) or len(sub) != 1:
            return False
        b, en, _ = sub.ranges[0]
        if sympy.sympify(b) != psym or sympy.sympify(en) != psym:
            return False
        found = True
    return found


def recognise(sdfg: SDFG, kp: KernelPlan) -> Optional[DataBounds]:
    """The CSR row pointer pattern in map kernel ``kp`` (None where it does not match exactly)."""
    k = kp.kernel
    if k.kind != KernelKind.MAP or len(k.maps) != 1:
        return None
    amap = k.maps[0]
    state, me = k.state, k.node
    scope_nodes = set(state.scope_subgraph(me, include_entry=False, include_exit=False).nodes())
    rng = kp.tiled_range(amap, clamp=True)
    params = list(amap.info.params)
    for inner in [n for n in scope_nodes if isinstance(n, nodes.MapEntry) and state.entry_node(n) is me]:
        for d, ptr, p, c1, c2 in _inner_bounds(state, inner, params):
            pdesc = sdfg.arrays.get(ptr)
            if pdesc is None or pdesc.transient or len(pdesc.shape) != 1 or _written_anywhere(sdfg, ptr):
                continue
            lo, hi, st = rng.ranges[params.index(p)]
            if sympy.sympify(st) != 1:
                continue
            jparam = inner.map.params[d]
            arrays = []
            for arr, c in kp.arrays.items():
                desc = sdfg.arrays.get(arr)
                if (arr == ptr or c.write is not None or not c.is_read or desc is None or desc.transient
                        or len(desc.shape) != 1 or isinstance(desc, dace.data.Scalar)
                        or _written_anywhere(sdfg, arr)):
                    continue
                if _reads_only_at(state, scope_nodes, me, inner, arr, jparam):
                    arrays.append(arr)
            if not arrays:
                continue
            tag = f"__dsdfg_csr{k.index}"
            return DataBounds(k.index, k.label, ptr, tuple(arrays), tuple(str(sdfg.arrays[a].shape[0]) for a in arrays),
                              str(pdesc.shape[0]), c1, c2, (str(lo), str(hi)), tuple(kp.grid),
                              axis_symbols(kp.rank_syms, kp.grid),
                              f"{tag}_lo", f"{tag}_hi", f"{tag}_n")
    return None


def apply(sdfg: SDFG, kp: KernelPlan, db: DataBounds) -> None:
    """Give ``db.arrays`` their data-bounded blocks in ``kp`` and declare the symbols the kernel uses."""
    lo, hi, n = (dc.sym(s) for s in (db.lo, db.hi, db.n))
    for arr in db.arrays:
        c = kp.arrays[arr]
        c.reads = [((lo, hi - 1),)]
        c.alloc_start, c.alloc_shape = (lo,), (n,)
        c.read_covers = False          # no distributed copy for other kernels to reuse
    for s in (db.lo, db.n):
        if s not in sdfg.symbols:
            sdfg.add_symbol(s, dace.int64)


def _rank_rows(db: DataBounds, values, nranks: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per rank ``0 .. nranks-1``: its first and last row (inclusive) and whether it is in the grid."""
    vals, inside = rank_symbol_values(db.grid, db.rank_syms, values, nranks)
    return evaluate_many(db.rows[0], vals, nranks), evaluate_many(db.rows[1], vals, nranks), inside


def inspect(bounds: List[DataBounds], arrays: Dict[str, np.ndarray], values, nranks: int) -> Dict[str, object]:
    """The symbol values of ``bounds`` from the pointer arrays' contents (rank 0, every call).
    Refuses (InputError) pointer values that would read outside the arrays."""
    out: Dict[str, object] = {}
    for db in bounds:
        ptr = arrays.get(db.pointer)
        if ptr is None:
            continue
        ptr = np.asarray(ptr).astype(np.int64, copy=False).ravel()
        first, last, inside = _rank_rows(db, values, nranks)
        lengths = [evaluate(x, values) for x in db.lengths]
        lo, hi = np.zeros(nranks, np.int64), np.zeros(nranks, np.int64)
        for q in range(nranks):
            a, b = int(first[q]), int(last[q])
            if not inside[q] or b < a:
                continue
            if a + min(db.c1, db.c2) < 0 or b + max(db.c1, db.c2) >= len(ptr):
                raise InputError(f"`{db.label}` reads `{db.pointer}[{a + min(db.c1, db.c2)}:"
                                 f"{b + max(db.c1, db.c2) + 1}]`, outside its {len(ptr)} elements")
            starts, ends = ptr[a + db.c1:b + db.c1 + 1], ptr[a + db.c2:b + db.c2 + 1]
            used = ends > starts
            if not used.any():
                continue
            lo[q], hi[q] = int(starts[used].min()), int(ends[used].max())
            if lo[q] < 0 or hi[q] > min(lengths):
                bad = [x for x, n in zip(db.arrays, lengths) if hi[q] > n] or list(db.arrays)
                raise InputError(f"`{db.pointer}` of `{db.label}` holds the range {lo[q]}:{hi[q]}, outside "
                                 f"`{bad[0]}` ({min(lengths)} elements): the row pointer must lie in "
                                 f"0..{min(lengths)}")
        out[db.lo], out[db.hi] = lo, hi
        out[db.n] = max(int((hi - lo).max(initial=0)), 1)
    return out


def inspect_call(low, arrays: Dict[str, np.ndarray], values, nranks: int):
    """Rank 0 at a call: (``values`` with the data-bounded blocks of this call's arrays, error or None)."""
    try:
        return {**values, **inspect(low.data_bounds, arrays, values, 1 if low.rank0_only else nranks)}, None
    except DistributedLoweringError as exc:
        return values, (type(exc).__name__, str(exc))


def complete(bounds: List[DataBounds], values, nranks: int) -> Dict[str, object]:
    """``values`` with an upper bound for the symbols no inspection gave: the whole arrays on every
    rank of the grid (sizes only: a report or layout without the pointer array's contents)."""
    missing = [db for db in bounds if db.lo not in values]
    if not missing:
        return values
    values = dict(values)
    for db in missing:
        full = min(evaluate(x, values) for x in db.lengths)
        _, _, inside = _rank_rows(db, values, nranks)
        values[db.lo] = np.zeros(nranks, np.int64)
        values[db.hi] = np.where(inside, full, 0).astype(np.int64)
        values[db.n] = max(full, 1)
    return values


def inputs_of(sdfg: SDFG) -> Tuple[str, ...]:
    """The arrays whose contents the call-time inspection of ``sdfg``'s lowering reads."""
    low = getattr(sdfg, "_distsdfg", None)
    return tuple(sorted({db.pointer for db in getattr(low, "data_bounds", ())}))
