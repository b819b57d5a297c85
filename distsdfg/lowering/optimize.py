"""Rank-local optimisation of a lowered SDFG: the kernels each rank runs, not what moves between ranks.

``lower`` calls ``optimize_lowered`` after rank tiling (``lower(..., optimize=False)`` or
``DISTSDFG_OPTIMIZE=0`` turns it off). The communication plan is fixed by then: every
``DistributedMemlet`` keeps the buffers it reads and writes, and a buffer some step or
another state uses is never removed. What changes:

Steps 1 to 4 apply to straight-line programs with root placement (see ``optimize_lowered``).

1. Kernels on the same process grid share their rank-coordinate symbols (a rank has the same
   coordinates in equal grids), so their tiled map ranges become equal expressions.
2. DaCe's ``MapFusion`` merges chains of element-wise maps with equal ranges; a local buffer
   only the fused maps used disappears (one pass over memory instead of one per operation).
3. With one rank (``lower(sdfg, "auto", nprocs=1)``; ``Lowered.rank0_only``), a step that would
   copy a whole argument into a kernel's local buffer (or a whole local result into the
   argument or result it gathers to) is removed and the kernel reads and writes the argument
   itself (``alias_whole_blocks``): no copy, no full-size temporary. The program then runs on
   rank 0 alone; other ranks of a larger communicator return None.
4. With more ranks, a ``redist`` step that only copies a rank's block between a map kernel's and a
   library kernel's buffers of one grid (the lowering shares a buffer only between kernels of one
   kind: map buffers are indexed from their block's origin, library buffers from zero) is removed
   and the two buffers become one, the map's indices shifted (``alias_local_copies``).
5. ``Reduce`` library nodes expand to DaCe's ``pure-seq`` implementation, its accumulator read out by
   value (``dace_compat.sequential_reduce``: the inner loop vectorizes) (a map over the kept
   axes around a sequential loop over the reduced ones), several times faster than the
   default ``pure`` expansion, which accumulates every element through a write-conflict
   resolution.
6. Accumulating maps that are a contraction of two arrays (DaCe's pure einsums:
   ``out[b, h, i, j] += x[b, i, k] * W[k, h, j]``, the einsums with no batched-GEMM form) become one
   BLAS matrix product on the operands' blocks, permuted into matrices where they are not already,
   and a map adding the product into the output block (``contractions_to_products``,
   ``dace_compat.einsum``), when the block's product has at least ``MIN_PRODUCT`` multiply-adds.
6b. With one rank (``distsdfg.lowering.one_rank``): copies between whole buffers (an input read in
   several states, a batched product's reshaped operand or result) become views of the source;
   a zero fill followed by one add per element becomes an assignment; maps that only write
   never-read transients go; ``out = P1 + P2`` of two matrix products becomes two GEMMs into
   ``out``, the second with ``beta = 1``.
7. Maps that copy between two arrays along different dimensions (transposes) are tiled into
   cache-sized blocks (``tile_transposes``, ``dace_compat.tiling``).
8. The accumulating maps left (step 6's smaller ones, and others) whose every accumulated output is
   indexed by the map's first parameter, the one OpenMP splits, add without atomics
   (``nonatomic_accumulations``), also inside the map's scope and nested SDFGs (SpMV's row sums).
"""
from __future__ import annotations

import warnings
from typing import Dict, List

from dace.sdfg import SDFG

__all__ = ["optimize_lowered", "enabled", "alias_whole_blocks", "alias_local_copies", "tile_transposes",
           "nonatomic_accumulations", "contractions_to_products", "MIN_PRODUCT"]

#: Smallest contraction (multiply-adds of one rank's block) that ``contractions_to_products`` hands
#: to BLAS; blocks of symbolic size always go.
MIN_PRODUCT = 0


def enabled(optimize) -> bool:
    """``optimize`` as given to ``lower`` (None: on unless ``DISTSDFG_OPTIMIZE=0``)."""
    if optimize is None:
        from ..config import OPTIMIZE
        return OPTIMIZE.get()
    return bool(optimize)


def share_rank_symbols(sdfg: SDFG, kernels: List) -> Dict[str, str]:
    """Rename every kernel's rank symbols to those of the first kernel with the same grid.

    Updates ``kernels`` (``KernelGrid``s, which the runtime fills symbols from) and the SDFG.
    The solved plan does not change: its steps carry their own copies of the symbol names."""
    first: Dict[tuple, tuple] = {}
    mapping: Dict[str, str] = {}
    for kg in kernels:
        ref = first.setdefault(tuple(kg.grid), kg.rank_syms)
        for mine, theirs in zip(kg.rank_syms, ref):
            if mine and theirs and mine != theirs:
                mapping[mine] = theirs
        kg.rank_syms = tuple(mapping.get(s, s) for s in kg.rank_syms)
    if mapping:
        from ..dace_compat.rename import rename_symbols
        with warnings.catch_warnings():     # the shared symbol exists already: that is the point
            warnings.simplefilter("ignore", UserWarning)
            rename_symbols(sdfg, mapping)   # sdfg.replace_dict(mapping), linear in the SDFG
        for old in mapping:
            if old in sdfg.symbols:
                sdfg.remove_symbol(old)
    return mapping


def fuse_maps(sdfg: SDFG) -> int:
    """Fuse producer-consumer chains of maps with equal ranges (DaCe's MapFusion, with the candidate
    test of ``dace_compat.fusion``: the same fusions, without a walk over the SDFG per candidate);
    returns how many."""
    from ..dace_compat.fusion import fuse_maps_repeated
    return fuse_maps_repeated(sdfg)


def fast_reductions(sdfg: SDFG) -> int:
    """Give every plain ``Reduce`` node the sequential expansion (``dace_compat.sequential_reduce``:
    DaCe's ``pure-seq`` with a vectorizable inner loop); returns how many changed."""
    from dace.libraries.standard import Reduce

    from .. import dace_compat as dc
    impl = dc.sequential_reduce()
    n = 0
    for node, state in sdfg.all_nodes_recursive():
        if not isinstance(node, Reduce) or node.implementation not in (None, "pure"):
            continue
        if node.identity is None:       # pure-seq needs the identity to start from
            continue
        outs = state.out_edges(node)
        if len(outs) != 1 or outs[0].data.wcr is not None:
            continue
        node.implementation = impl
        n += 1
    return n


def _top_level_maps(sdfg: SDFG):
    """(state, map entry) of every map outside other maps, in every state of ``sdfg`` (not of its
    nested SDFGs), listed before the caller changes any of them."""
    from dace.sdfg import nodes

    from .. import dace_compat as dc
    return [(state, n) for state in dc.all_states(sdfg) for n in dc.top_level_nodes(state)
            if isinstance(n, nodes.MapEntry)]


def tile_transposes(sdfg: SDFG) -> int:
    """Tile every top-level map that reads or writes along two different contiguous dimensions
    (``dace_compat.tiling.transposed_params``) into ``TILE`` x ``TILE`` blocks; returns how many."""
    from ..dace_compat.tiling import tile_map, transposed_params
    found = [(state, entry, pair) for state, entry in _top_level_maps(sdfg)
             if (pair := transposed_params(state, entry)) is not None]
    for state, entry, pair in found:
        tile_map(sdfg, state, entry, pair)
    return len(found)


def nonatomic_accumulations(sdfg: SDFG) -> int:
    """Write-conflict resolutions of top-level maps that no two OpenMP threads share become plain
    updates (``dace_compat.tiling.outer_param_separates_writes``); returns how many memlets."""
    from ..dace_compat.tiling import mark_nonatomic, outer_param_separates_writes
    return sum(mark_nonatomic(state, entry) for state, entry in _top_level_maps(sdfg)
               if outer_param_separates_writes(state, entry))


def contractions_to_products(sdfg: SDFG, min_product: int = None) -> int:
    """Every top-level accumulating map that is a contraction of two arrays (``dace_compat.einsum``)
    and has at least ``min_product`` multiply-adds (default ``MIN_PRODUCT``; symbolic sizes count as
    large) becomes a BLAS matrix product; returns how many. Left alone: products that DaCe's MatMul
    expansion would misread (a matrix of extent one, ``dace_compat.matmul.misread_by_dace``), batched
    products in a program with a size symbol that DaCe's MKL expansion would hide, and every map
    when no optimized BLAS is configured (DaCe's reference GEMM is no faster than the map)."""
    from . import blas
    from ..dace_compat.einsum import BATCHED_LOCALS, choose_layout, contraction_of, matrix_shapes, to_matrix_product
    from ..dace_compat.matmul import misread_by_dace
    if not blas.info().optimized:
        return 0
    least = MIN_PRODUCT if min_product is None else min_product
    clash = bool(({str(s) for s in sdfg.free_symbols} | set(sdfg.symbols)) & set(BATCHED_LOCALS))
    found = []
    for state, entry in _top_level_maps(sdfg):
        if not any(e.data.wcr is not None for e in state.in_edges(state.exit_node(entry))):
            continue
        con = contraction_of(sdfg, state, entry)
        if con is None:
            continue
        work = con.multiply_adds()
        if work.is_number and int(work) < least:
            continue
        lay = choose_layout(sdfg, con)
        if (lay.batch and clash) or misread_by_dace(*matrix_shapes(con, lay)):
            continue
        found.append((state, con, lay))
    for state, con, lay in found:
        to_matrix_product(sdfg, state, con, lay)
    return len(found)


def _same(a, b) -> bool:
    """Two shapes (or stride tuples) provably equal."""
    from dace import symbolic
    if len(a) != len(b):
        return False
    return all(symbolic.simplify(symbolic.pystr_to_symbolic(str(x)) - symbolic.pystr_to_symbolic(str(y))) == 0
               for x, y in zip(a, b))


def _rename_edges(state, edges, old: str, new: str) -> None:
    for e in edges:
        for t in state.memlet_tree(e):
            if t.data.data == old:
                t.data.data = new


def _data_steps(sdfg: SDFG, specs):
    """Yields ``(state, node, step, [input edge], [output edge])`` for every communication node with
    one data input and one data output; each node's edges are read when it is reached, so callers
    may remove earlier nodes as they go."""
    from ..mpi import DistributedMemlet
    for st in sdfg.states():
        for node in list(st.nodes()):
            spec = specs.get(node.step) if isinstance(node, DistributedMemlet) else None
            if spec is None:
                continue
            ins = [e for e in st.in_edges(node) if e.dst_conn == "_in"]
            outs = [e for e in st.out_edges(node) if e.src_conn == "_out"]
            if len(ins) == 1 and len(outs) == 1:
                yield st, node, spec, ins, outs


def alias_whole_blocks(sdfg: SDFG, low, only=None) -> int:
    """One rank: drop the scatter, gather and one-rank reduce steps between a whole argument (or
    result) and a kernel's local buffer of the same shape; the kernel uses the argument's memory.

    Only where that cannot change a value: an input the program never writes, a result written
    once and never read, a local buffer used in the step's state only (by the kernel and the step).
    ``only``: the arguments and results to consider (all when None; the GPU's device-argument
    variant passes the arrays it takes in device memory, ``lowering.device_args``); views of
    results are left alone then. Returns how many steps were removed; the others keep their copies."""
    from dace import data as dt
    from dace.sdfg import nodes

    specs = {s.index: s for s in low.steps}
    reads: Dict[str, int] = {}
    writes: Dict[str, int] = {}
    where: Dict[str, set] = {}
    for st in sdfg.all_states():
        for n in st.data_nodes():
            reads[n.data] = reads.get(n.data, 0) + st.out_degree(n)
            writes[n.data] = writes.get(n.data, 0) + st.in_degree(n)
            where.setdefault(n.data, set()).add(id(st))
    removed = []
    for st, node, spec, ins, outs in _data_steps(sdfg, specs):
        if spec.kind not in ("scatter", "gather", "reduce") or getattr(spec, "acc", False):
            continue
        src, dst = ins[0].src, outs[0].dst
        glob, loc = (src, dst) if spec.kind == "scatter" else (dst, src)
        if not (isinstance(glob, nodes.AccessNode) and isinstance(loc, nodes.AccessNode)):
            continue
        if only is not None and glob.data not in only:
            continue
        gd, ld = sdfg.arrays[glob.data], sdfg.arrays[loc.data]
        if (not ld.transient or type(ld) is not dt.Array or where.get(loc.data) != {id(st)}
                or not isinstance(gd, dt.Array) or gd.dtype != ld.dtype or ld.storage != gd.storage
                or any(str(o) != "0" for o in spec.origin)
                or not _same(gd.shape, ld.shape) or not _same(gd.strides, ld.strides)):
            continue
        if isinstance(gd, dt.View):
            # a result's view: its only other edge goes to the argument it views, which nothing reads
            others = [e for e in st.all_edges(glob) if e is not outs[0]]
            base = others[0].dst if len(others) == 1 and others[0].src is glob else None
            if (spec.kind == "scatter" or base is None or not isinstance(base, nodes.AccessNode)
                    or sdfg.arrays[base.data].transient or reads.get(base.data, 0) or writes.get(base.data) != 1
                    or writes.get(glob.data) != 1):
                continue
        elif gd.transient:
            continue
        elif spec.kind == "scatter":
            if writes.get(glob.data, 0) or st.out_degree(glob) != 1:
                continue
        elif reads.get(glob.data, 0) or writes.get(glob.data) != 1 or st.in_degree(glob) != 1:
            continue
        locs = [n for n in st.data_nodes() if n.data == loc.data]
        if spec.kind == "scatter":
            if any(n is not loc and st.in_degree(n) for n in locs):
                continue
            moved = []
            for n in locs:
                for e in list(st.out_edges(n)):
                    moved.append(st.add_edge(glob, None, e.dst, e.dst_conn, e.data))
                    st.remove_edge(e)
            _rename_edges(st, moved, loc.data, glob.data)
        else:
            if len(locs) != 1 or st.out_degree(loc) != 1:
                continue
            moved = []
            for e in list(st.in_edges(loc)):
                moved.append(st.add_edge(e.src, e.src_conn, glob, None, e.data))
                st.remove_edge(e)
            _rename_edges(st, moved, loc.data, glob.data)
        feeds = [e.src for e in st.in_edges(node) if e.dst_conn in ("_plan", "_comm")]
        st.remove_node(node)
        for n in locs + feeds:
            if n in st.nodes() and st.degree(n) == 0:
                st.remove_node(n)
        if loc.data in sdfg.arrays and not any(n.data == loc.data for s in sdfg.all_states() for n in s.data_nodes()):
            sdfg.remove_data(loc.data, validate=False)
        removed.append(spec.index)
    return len(removed)


def _same_layout(src, dst) -> bool:
    """Two layouts (``plan.Layout``) give every rank the same block at the same origin: a ``redist``
    between them is a copy within each rank. Their kernels' rank symbols may differ in name; equal
    grids (up to axes of size one) number ranks alike, so their split axes are matched in order."""
    import sympy
    from dace import symbolic

    from ..values.exprs import same_value
    if (src.op or dst.op or src.view_shape or dst.view_shape or src.home or dst.home or src.clip or dst.clip
            or len(src.boxes) != 1 or len(dst.boxes) != 1):
        return False
    mine = [(s, g) for s, g in zip(dst.rank_syms, dst.grid) if g > 1]
    theirs = [(s, g) for s, g in zip(src.rank_syms, src.grid) if g > 1]
    if [g for _, g in mine] != [g for _, g in theirs] or not all(s for s, _ in mine + theirs):
        return False
    axes = [sympy.Symbol(f"__dsdfg_axis{i}") for i in range(len(mine))]

    def neutral(expr, names):
        e = symbolic.pystr_to_symbolic(str(expr))
        return e.xreplace({x: names[x.name] for x in e.free_symbols if x.name in names})
    a_n = {s: n for (s, _), n in zip(mine, axes)}
    b_n = {s: n for (s, _), n in zip(theirs, axes)}
    pairs = list(zip(dst.origin, src.origin)) + list(zip(dst.local_shape, src.local_shape))
    for (s0, e0), (s1, e1) in zip(dst.boxes[0], src.boxes[0]):
        pairs += [(s0, s1), (e0, e1)]
    if len(dst.origin) != len(src.origin) or len(dst.boxes[0]) != len(src.boxes[0]):
        return False
    return all(same_value(neutral(a, a_n), neutral(b, b_n)) for a, b in pairs)


def _merge_buffer(sdfg: SDFG, st, drop: str, keep: str) -> None:
    """Every use of local buffer ``drop`` in ``st`` becomes a use of ``keep`` (same block, same
    shape and strides, possibly another index offset: map buffers are indexed from their block's
    origin, library buffers from zero), its subsets shifted by the difference of the offsets."""
    from dace import symbolic
    from dace.sdfg import nodes
    dd, kd = sdfg.arrays[drop], sdfg.arrays[keep]
    sym = symbolic.pystr_to_symbolic
    delta = [sym(str(a)) - sym(str(b)) for a, b in zip(dd.offset, kd.offset)]
    shift = any(d != 0 for d in delta)
    for e in st.edges():
        m = e.data
        if m.data == drop:
            m.data = keep
            if shift and m.subset is not None:
                m.subset.offset(delta, False)
        elif m.other_subset is not None and shift and any(
                isinstance(n, nodes.AccessNode) and n.data == drop for n in (e.src, e.dst)):
            m.other_subset.offset(delta, False)
    for n in st.data_nodes():
        if n.data == drop:
            n.data = keep


def alias_local_copies(sdfg: SDFG, low) -> int:
    """Drop the ``redist`` steps that only copy a rank's block between two local buffers of one
    process grid (a map kernel's and a library kernel's: the lowering shares a buffer only between
    kernels of one kind, since map buffers are indexed from their block's origin and library
    buffers from zero); the consumer reads the producer's buffer, its indices shifted.

    Only where no value can change: both buffers are transients of one state with equal shapes
    and strides, the copy is the only write of its destination and the source is written once
    (by its producer, before the copy). Returns how many steps were removed."""
    from dace import data as dt
    from dace.sdfg import nodes

    specs = {s.index: s for s in low.steps}
    writes: Dict[str, int] = {}
    where: Dict[str, set] = {}
    for st in sdfg.all_states():
        for n in st.data_nodes():
            writes[n.data] = writes.get(n.data, 0) + st.in_degree(n)
            where.setdefault(n.data, set()).add(id(st))
    removed = 0
    for st, node, spec, ins, outs in _data_steps(sdfg, specs):
        if (spec.kind != "redist" or spec.source is None or spec.acc or spec.inplace
                or not _same_layout(spec.source, spec.layout)):
            continue
        src, dst = ins[0].src, outs[0].dst
        if not (isinstance(src, nodes.AccessNode) and isinstance(dst, nodes.AccessNode)) or src.data == dst.data:
            continue
        a, b = sdfg.arrays[src.data], sdfg.arrays[dst.data]
        if (type(a) is not dt.Array or type(b) is not dt.Array or not a.transient or not b.transient
                or a.dtype != b.dtype or a.storage != b.storage or where.get(src.data) != {id(st)}
                or where.get(dst.data) != {id(st)} or writes.get(dst.data) != 1 or writes.get(src.data, 0) > 1
                or not _same(a.shape, b.shape) or not _same(a.strides, b.strides)):
            continue
        source_writes = writes.get(src.data, 0)
        for e in list(st.out_edges(dst)):           # the consumers read the source's node
            st.add_edge(src, e.src_conn, e.dst, e.dst_conn, e.data)
            st.remove_edge(e)
        feeds = [e.src for e in st.in_edges(node) if e.dst_conn in ("_plan", "_comm")]
        st.remove_node(node)
        for n in [dst] + feeds:
            if n in st.nodes() and st.degree(n) == 0:
                st.remove_node(n)
        # Keep the buffer indexed from zero (the library kernel's) where there is one.
        zero_b = all(str(o) == "0" for o in b.offset)
        drop, keep = (src.data, dst.data) if zero_b and not all(str(o) == "0" for o in a.offset) else \
            (dst.data, src.data)
        _merge_buffer(sdfg, st, drop, keep)
        if not any(n.data == drop for s in sdfg.all_states() for n in s.data_nodes()):
            sdfg.remove_data(drop, validate=False)
        writes[keep] = source_writes
        removed += 1
    return removed


def optimize_lowered(sdfg: SDFG, low, *, straight: bool, one_rank: bool = False) -> Dict[str, int]:
    """Optimise the ranks' kernels of a lowered CPU program in place; returns what was done.

    ``one_rank``: lowered for one rank (``lower(..., "auto", nprocs=1)``): steps between whole
    arrays are removed and the program runs on rank 0 alone (``alias_whole_blocks``).
    ``straight``: a program without loops, branches or distributed placement. Only those are
    fused: DaCe 1.0.2's MapFusion leaves invalid SDFGs behind on stencils in loops (home
    buffers), so programs with home buffers keep their maps (reductions are still expanded
    faster). Fusion is tried on a copy first and skipped if the copy does not validate; a copy
    that validates becomes the program (``dace_compat.fusion.copy_into``)."""
    from .. import dace_compat as dc
    done = {"shared_symbols": 0, "fused": 0}
    if straight and not low.homes and not low.boundary:
        import copy

        from dace.sdfg.validation import InvalidSDFGError
        trial = copy.deepcopy(sdfg)
        trial_kernels = copy.deepcopy(low.kernels)
        shared = share_rank_symbols(trial, trial_kernels)
        try:
            ok = fuse_maps(trial)
            if ok:
                trial.validate()
        except (InvalidSDFGError, ValueError, KeyError):
            ok = 0
        if ok:      # the fused copy becomes the program (rather than fusing it a second time)
            from ..dace_compat.fusion import copy_into
            before = set(sdfg.arrays)
            for kg, tk in zip(low.kernels, trial_kernels):
                kg.rank_syms = tk.rank_syms
            done["shared_symbols"] = len(shared)
            copy_into(sdfg, trial)
            done["fused"] = ok
            dc.remove_unused_transients(sdfg, before)
    if straight and not low.homes and not low.boundary and low.nprocs > 1:
        done["local_copies"] = alias_local_copies(sdfg, low)
    if one_rank and straight and not low.homes and not low.boundary and low.nprocs == 1:
        done["aliased"] = alias_whole_blocks(sdfg, low)
        low.rank0_only = True
    done["reductions"] = fast_reductions(sdfg)
    done["products"] = contractions_to_products(sdfg)
    if one_rank and straight and not low.homes and not low.boundary and low.nprocs == 1:
        from .one_rank import copies_to_views, drop_dead_writes, fills_to_assignments, sums_into_products
        done["views"] = copies_to_views(sdfg, low)
        done["accumulated"] = sums_into_products(sdfg, low)
        done["fills"] = fills_to_assignments(sdfg, low)
        done["dead"] = drop_dead_writes(sdfg)
    done["tiled"] = tile_transposes(sdfg)
    done["nonatomic"] = nonatomic_accumulations(sdfg)
    return done
