"""Adapter: every DaCe-version-sensitive call (written against dace 1.0.2) lives here."""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import dace
import sympy
from dace import data as dt
from dace import dtypes, subsets, symbolic
from dace.config import Config
from dace.sdfg import SDFG, SDFGState, nodes
from dace.sdfg import propagation as _propagation
from dace.sdfg import utils as sdutil
import dace.library
from dace.transformation import pass_pipeline as _ppl
from dace.transformation.interstate import loop_detection as _loop_detection
from dace.transformation.interstate import loop_to_map as _loop_to_map

from ..geometry.boxes import row_major_strides
from .dace2 import install as _dace2_names
_dace2_names()      # DaCe 2.0's renamed API under the 1.0.2 names this package calls (dace2.py)
from .build import (BUILD_TYPE, SEQ_REDUCE, ExpandReduceSequentialByValue, allow_view_arguments, batched_products,
                    blas_chosen_by_user, blas_implementation, blas_library, blas_nodes, build_folder_chosen, call_compiled,
                    cxx_compiler,
                    ensure_mpi_on_path, fresh_return_arrays, from_json, generate_code, load_compiled,
                    mkl_link_library, mpi_bin_dir, order_return_arrays, reinitialise, release_build,
                    sequential_maps, sequential_reduce, structure_fingerprint, to_json, use_blas_implementation, use_openblas_environment,
                    openblas_environment, write_program_folder,
                    write_program_json)
from .expansions import force_pure_expansion, repair_init_accumulate_races, standalone_expansion
from .indirect import narrow_indirect_accesses
from .rename import rename_data
from .trace import library_symbol
from . import trace as _trace      # registers the TRACE instrumentation (programs saved with it load anywhere)
from .auto_opt import auto_optimize_cpu, fuse_maps_greedily, fused_in_place

__all__ = [
    "simplify", "repair_init_accumulate_races", "propagate", "reduction_op", "force_pure_expansion",
    "standalone_expansion", "top_level_nodes", "all_states", "pystr", "sym", "int_ceil", "Min",
    "program_segments", "interstate_reads", "viewed_arrays", "remove_unused_transients", "reshape_views",
    "auto_optimize_cpu", "fuse_maps_greedily", "fused_in_place",
    "narrow_indirect_accesses", "accesses_indirectly",
]

#: Building and calling compiled programs: ``dace_compat.build``, re-exported here.
__all__ += ["BUILD_TYPE", "SEQ_REDUCE", "ExpandReduceSequentialByValue", "allow_view_arguments", "batched_products",
            "blas_chosen_by_user", "blas_implementation", "blas_library", "blas_nodes", "call_compiled", "cxx_compiler",
            "ensure_mpi_on_path", "fresh_return_arrays", "from_json", "generate_code", "load_compiled",
            "mkl_link_library", "mpi_bin_dir", "order_return_arrays", "reinitialise", "release_build", "rename_data",
            "sequential_reduce", "structure_fingerprint", "to_json", "use_blas_implementation",
            "use_openblas_environment", "openblas_environment", "write_program_folder", "write_program_json"]

int_ceil = symbolic.int_ceil
Min = sympy.Min


def sym(name: str):
    """An integer DaCe symbol."""
    return symbolic.symbol(name, dtype=dtypes.int64)


def pystr(expr) -> str:
    return symbolic.symstr(expr)


def all_states(sdfg: SDFG) -> List[SDFGState]:
    return list(sdfg.all_states())


def top_level_nodes(state: SDFGState) -> List[nodes.Node]:
    """Nodes of ``state`` outside any map scope, in a deterministic topological order."""
    sd = state.scope_dict()
    return [n for n in sdutil.dfs_topological_sort(state) if sd[n] is None]


def exact_ranges(sdfg: SDFG, *, dry_run: bool = False) -> int:
    """Replace DaCe's ``SymExpr`` bounds (an exact value with an approximation, e.g. the
    ``min(N - 1, t + 3)`` ends of ``MapTiling``'s inner maps) by their exact value in every map range
    and memlet subset, so that sympy can work with them. Returns how many bounds were replaced
    (``dry_run``: would be; ``sdfg`` is left as it is)."""
    count = 0

    def plain(r):
        nonlocal count
        if isinstance(r, subsets.Range):
            count += sum(isinstance(x, symbolic.SymExpr) for t in r.ranges for x in t)
            if not dry_run:     # (every range anew, as tuples: later analyses are much faster on them)
                r.ranges = [tuple(x.expr if isinstance(x, symbolic.SymExpr) else x for x in t) for t in r.ranges]

    for sd in sdfg.all_sdfgs_recursive():
        for st in sd.states():
            for n in st.nodes():
                if isinstance(n, nodes.MapEntry):
                    plain(n.map.range)
            for e in st.edges():
                plain(e.data.subset)
                plain(e.data.other_subset)
    return count


def copies_to_maps(sdfg: SDFG, *, dry_run: bool = False) -> int:
    """Top-level copies between arrays (``p[:, -1] = p[:, -2]``, ``B[:] = A``: an edge from one access
    node to another, no map) become maps (DaCe's ``CopyToMap``), so that the planner schedules them
    and the lowering moves their blocks like any kernel's; views and scalars are left alone.
    Returns how many copies were turned (``dry_run``: 1 if one would be, ``sdfg`` left as it is)."""
    from dace.transformation.dataflow import CopyToMap
    done = 0
    for state in all_states(sdfg):
        for e in list(state.edges()):
            a, b = e.src, e.dst
            if not (isinstance(a, nodes.AccessNode) and isinstance(b, nodes.AccessNode)) or e.data.is_empty():
                continue
            if state.entry_node(a) is not None or state.entry_node(b) is not None:
                continue
            if type(a.desc(sdfg)) is not dt.Array or type(b.desc(sdfg)) is not dt.Array:
                continue
            if len(state.edges_between(a, b)) != 1:
                continue
            if dry_run:
                return 1
            # The same size written with two kinds of symbol (``i`` of the loop, ``i`` of a subset)
            # is two sizes to CopyToMap, which then takes a path that fails (correlation's
            # ``corr[i + 1:M, i] = corr[i, i + 1:M]``): both subsets in one spelling first.
            for attr in ("subset", "other_subset"):
                sub = getattr(e.data, attr)
                if isinstance(sub, subsets.Range):
                    setattr(e.data, attr, subsets.Range.from_string(str(sub)))
            CopyToMap.apply_to(sdfg, options={"ignore_strides": True}, verify=True, save=False, a=a, b=b)
            done += 1
    return done


def simplify(sdfg: SDFG) -> SDFG:
    """DaCe's simplify() followed by our repair of its known miscompilations."""
    sdfg.simplify()
    repair_init_accumulate_races(sdfg)
    return sdfg


def accesses_indirectly(accesses) -> bool:
    """Whether a map reads or writes through data-dependent indices (``x[idx[i]]``, ``h[idx[i]] += 1``):
    DaCe then gives the map-level memlet fewer accesses than its subset has elements (``x(1) [0:33]``)."""
    for acc in accesses.values():
        for m in acc.reads + acc.writes:
            if m.is_empty() or m.subset is None or m.dynamic:
                continue
            if sympy.simplify(sympy.sympify(m.volume) - sympy.sympify(m.subset.num_elements())) != 0:
                return True
    return False


def propagate_wcr_outward(sdfg: SDFG, *, dry_run: bool = False) -> int:
    """Put an inner accumulation's conflict resolution on the memlets that carry it out of its scopes.

    DaCe 1.0.2's frontend writes ``r[i] += A[i, j]`` in a map nested in another map (``for i in
    dace.map: for j in dace.map:``) with a WCR on the tasklet's memlet only; the edges from the
    inner map's exit outwards carry none, so the outer map looks like a plain write of ``r[i]``
    that drops ``r``'s initial value. The program accumulates: a map exit's outgoing memlet
    takes the WCR of the memlet that enters it on the same connector. Returns how many it set
    (``dry_run``: 1 if it would set one, ``sdfg`` left as it is)."""
    changed, total = True, 0
    while changed:
        changed = False
        for state in sdfg.all_states():
            for ex in [n for n in state.nodes() if isinstance(n, nodes.MapExit)]:
                inner = {e.dst_conn[3:]: e for e in state.in_edges(ex) if e.dst_conn and e.dst_conn.startswith("IN_")}
                for e in state.out_edges(ex):
                    src = inner.get((e.src_conn or "")[4:]) if (e.src_conn or "").startswith("OUT_") else None
                    if (src is None or e.data.is_empty() or e.data.wcr is not None or src.data.wcr is None
                            or src.data.data != e.data.data):
                        continue
                    if dry_run:
                        return 1
                    e.data.wcr = src.data.wcr
                    changed, total = True, total + 1
    return total


def propagate(memlets: Sequence[dace.Memlet], arr: dt.Data, params: Sequence[str],
              rng: subsets.Range) -> dace.Memlet:
    """Image of ``memlets`` over the iteration range ``rng`` of ``params``.

    DaCe's setting ``optimizer.symbolic_positive`` (on by default) makes the union of several
    memlets' images take a symbolic bound over a number as the larger one: ``A[i, j]`` and
    ``A[j, i]`` over ``i in [0, 29]``, ``j`` in a rank's block ``[8*r, 8*r + 7]``, give
    ``A[0:8*r + 8, 0:8*r + 8]`` instead of ``A[0:30, 0:30]`` (rows the rank reads never arrive: a
    wrong answer). Rank-tiled bounds are below the array's extent, so the union here takes
    ``Min``/``Max`` of the bounds it cannot compare."""
    defined = set(rng.free_symbols)
    for m in memlets:
        defined |= set(m.free_symbols)
    defined -= set(params)
    defined = set(symbolic.pystr_to_symbolic(p) for p in defined)
    old = Config.get("optimizer", "symbolic_positive")
    Config.set("optimizer", "symbolic_positive", value=False)
    try:
        result = _propagation.propagate_subset(list(memlets), arr, list(params), rng, defined_variables=defined)
    finally:
        Config.set("optimizer", "symbolic_positive", value=old)
    return _widened_to_affine_corners(result, memlets, params, rng)


def _affine_extremes(expr, params: Sequence[str], rng: subsets.Range):
    """(least, greatest) value of ``expr`` over the box ``rng`` of ``params`` when ``expr`` is
    affine in them with number coefficients (reached at the box's corners); None otherwise."""
    expr = symbolic.pystr_to_symbolic(expr) if isinstance(expr, str) else sympy.sympify(expr)
    low, high = expr, expr
    for p, (b, e, _) in zip(params, rng.ranges):
        sym = symbolic.pystr_to_symbolic(p)
        if sym not in expr.free_symbols:
            continue
        poly = sympy.Poly(expr, sym) if expr.is_polynomial(sym) else None
        if poly is None or poly.degree() != 1:
            return None
        coeff = poly.coeffs()[0]
        if not coeff.is_Number:
            return None
        first, last = (b, e) if coeff > 0 else (e, b)
        low, high = low.subs(sym, first), high.subs(sym, last)
    return low, high


def _widened_to_affine_corners(result: dace.Memlet, memlets: Sequence[dace.Memlet], params: Sequence[str],
                               rng: subsets.Range) -> dace.Memlet:
    """DaCe 1.0.2's propagation of ``A[2*i]`` over ``i`` in ``[0, 49]`` gives ``A[0:50]`` (the step
    is lost when the index has no constant term: a rank reads half of what it needs, a wrong
    answer). Every dimension whose indices are affine in the parameters is widened here to the
    least and greatest index at the iteration box's corners wherever those are provably outside
    DaCe's bounds; elsewhere DaCe's result stands."""
    sub = result.subset
    if isinstance(sub, subsets.Indices):
        sub = subsets.Range.from_indices(sub)
    if not isinstance(sub, subsets.Range) or any(not isinstance(m.subset, (subsets.Range, subsets.Indices))
                                                 for m in memlets):
        return result
    ranges = list(sub.ranges)
    for d, (b, e, _) in enumerate(sub.ranges):
        for m in memlets:
            msub = subsets.Range.from_indices(m.subset) if isinstance(m.subset, subsets.Indices) else m.subset
            if d >= len(msub.ranges):
                return result
            lo = _affine_extremes(msub.ranges[d][0], params, rng)
            hi = _affine_extremes(msub.ranges[d][1], params, rng)
            if lo is not None and sympy.sympify(b - lo[0]).is_positive:
                b = lo[0]
            if hi is not None and sympy.sympify(hi[1] - e).is_positive:
                e = hi[1]
        if (b, e) != ranges[d][:2]:
            ranges[d] = (b, e, 1)
    if ranges == list(sub.ranges):
        return result
    out = dace.Memlet(data=result.data, subset=subsets.Range(ranges), wcr=result.wcr)
    out.dynamic = result.dynamic
    return out


def reduction_op(wcr: Optional[str]) -> Optional[str]:
    """'sum' | 'prod' | 'max' | 'min' for a write-conflict lambda, None if not one of those."""
    if wcr is None:
        return None
    from dace.frontend.operations import detect_reduction_type
    rt = detect_reduction_type(wcr)
    return {
        dtypes.ReductionType.Sum: "sum",
        dtypes.ReductionType.Product: "prod",
        dtypes.ReductionType.Max: "max",
        dtypes.ReductionType.Min: "min",
    }.get(rt)


def scope_edges(state: SDFGState, entry: nodes.MapEntry):
    """All edges strictly inside the scope of ``entry`` (between its entry and exit)."""
    sub = state.scope_subgraph(entry, include_entry=True, include_exit=True)
    return list(sub.edges())


def scope_symbols(state: SDFGState, entry: nodes.EntryNode) -> set:
    """Names of the symbols the body of ``entry``'s scope uses (memlets, tasklet code, inner map
    ranges, nested SDFG symbol mappings), the map's own parameters included."""
    inner = state.scope_subgraph(entry, include_entry=False, include_exit=False)
    out = set()
    for n in inner.nodes():
        if isinstance(n, nodes.Tasklet):
            out |= {str(s) for s in n.free_symbols}
        elif isinstance(n, nodes.NestedSDFG):
            for v in n.symbol_mapping.values():
                out |= {str(s) for s in symbolic.pystr_to_symbolic(str(v)).free_symbols}
        elif isinstance(n, nodes.EntryNode):
            out |= {str(s) for s in n.free_symbols}
    edges = list(inner.edges()) + state.out_edges(entry) + state.in_edges(state.exit_node(entry))
    for e in edges:
        out |= {str(s) for s in e.data.free_symbols}
    return out


def evaluate(expr, values: Dict[str, int]) -> int:
    """Evaluate an integer expression with concrete symbol values."""
    e = symbolic.pystr_to_symbolic(expr) if isinstance(expr, str) else sympy.sympify(expr)
    if not getattr(e, "free_symbols", None):
        return int(e)
    subs = {s: values[str(s)] for s in e.free_symbols if str(s) in values}
    missing = [str(s) for s in e.free_symbols if str(s) not in values]
    if missing:
        raise KeyError(missing[0])
    return int(e.subs(subs))


def runtime_defined_symbols(sdfg: SDFG) -> set:
    """Symbols the program assigns while it runs: interstate assignments (for-loop variables
    among them) and the loop variables of loop regions."""
    out = {str(k) for e in sdfg.all_interstate_edges() for k in e.data.assignments}
    regions = getattr(sdfg, "all_control_flow_regions", None)
    if regions is not None:
        for r in regions():
            var = getattr(r, "loop_variable", None)
            if var:
                out.add(str(var))
    return out


def program_segments(sdfg: SDFG) -> Tuple[List[List[SDFGState]], bool]:
    """States in program order, cut where control flow is not a straight line.

    A top-level chain of plain states is one segment (``linear`` is True). Otherwise
    (loops, branches, regions) every state is its own segment, in ``all_states`` order.
    """
    top = list(sdfg.nodes())
    linear = all(isinstance(n, SDFGState) for n in top) and all(
        sdfg.out_degree(n) <= 1 and sdfg.in_degree(n) <= 1 for n in top)
    if linear and top:
        starts = [n for n in top if sdfg.in_degree(n) == 0]
        if len(starts) == 1:
            order, cur = [], starts[0]
            while cur is not None and cur not in order:
                order.append(cur)
                succ = sdfg.successors(cur)
                cur = succ[0] if succ else None
            if len(order) == len(top):
                return [order], True
    return [[st] for st in sdfg.all_states()], False


def interstate_reads(sdfg: SDFG, state: SDFGState) -> set:
    """Arrays read by the conditions and assignments of the edges leaving ``state``."""
    out = set()
    graph = state.parent_graph if hasattr(state, "parent_graph") else sdfg
    for e in graph.out_edges(state):
        out |= {s for s in e.data.read_symbols() if s in sdfg.arrays}
    return out


def reshape_views(sdfg: SDFG) -> Dict[str, str]:
    """Views that are a row-major reshape of a whole array: ``{view: array}``.

    Data in such a view has the array's memory order, so a block of one is a block of the
    other when the split does not cut across merged dimensions (checked when the plan is
    solved, for concrete sizes). Strided views (transposes, slices) are not included. Element
    counts that are equal only for some sizes (``B*S*E`` and ``B*S*H*EH``) are accepted here and
    compared when the plan is solved.
    """
    out = {}
    for name, desc in sdfg.arrays.items():
        if not isinstance(desc, dt.View):
            continue
        default = row_major_strides([sympy.sympify(s) for s in desc.shape])
        strides = [sympy.sympify(x) for x in desc.strides]
        if any(sympy.simplify(a - b) != 0 for a, b in zip(strides, default)) or any(
                sympy.sympify(o) != 0 for o in (desc.offset or [])):
            continue
        targets = set()
        for st in sdfg.all_states():
            for n in st.data_nodes():
                if n.data != name:
                    continue
                for e in st.all_edges(n):
                    other = e.dst if e.src is n else e.src
                    if not isinstance(other, nodes.AccessNode):
                        continue
                    odesc = sdfg.arrays[other.data]
                    if isinstance(odesc, dt.View):
                        targets.add(None)
                        continue
                    full = [sympy.sympify(x) for x in odesc.shape]
                    sub = e.data.subset if e.data.data == other.data else e.data.other_subset
                    if sub is None or [sympy.sympify(x) for x in sub.size()] != full:
                        targets.add(None)
                    targets.add(other.data)
        if len(targets) != 1 or None in targets:
            continue
        target = targets.pop()
        # Sizes that only agree for some values of the symbols (the thesis' ``(B, S, H, E_H)``
        # reshaped to ``(B, S, E)``, with E == H * E_H) count as a reshape: the solver checks the
        # element counts for the concrete sizes of every call (``solve._unclipped_blocks``).
        diff = sympy.simplify(sympy.sympify(desc.total_size) - sympy.sympify(sdfg.arrays[target].total_size))
        if diff != 0 and not diff.free_symbols:
            continue
        out[name] = target
    return out


def viewed_arrays(sdfg: SDFG, exclude: Iterable[str] = ()) -> set:
    """Views and the arrays they view (both are left to the root path, never fused), except the
    views in ``exclude`` (their own arrays stay eligible unless another view touches them)."""
    exclude = set(exclude)
    out = {name for name, desc in sdfg.arrays.items() if isinstance(desc, dt.View) and name not in exclude}
    for st in sdfg.all_states():
        for n in st.data_nodes():
            if n.data in out:
                for e in st.all_edges(n):
                    for other in (e.src, e.dst):
                        if isinstance(other, nodes.AccessNode):
                            out.add(other.data)
    return out


def remove_unused_transients(sdfg: SDFG, names: Iterable[str]) -> List[str]:
    """Drop isolated access nodes of ``names`` and the transients no state accesses any more."""
    names = set(names)
    for st in sdfg.all_states():
        for n in list(st.data_nodes()):
            if n.data in names and st.degree(n) == 0:
                st.remove_node(n)
    used = {n.data for st in sdfg.all_states() for n in st.data_nodes()}
    for e in sdfg.all_interstate_edges():
        used |= set(e.data.read_symbols())
    removed = []
    for name in sorted(names):
        desc = sdfg.arrays.get(name)
        if desc is not None and desc.transient and name not in used:
            sdfg.remove_data(name, validate=False)
            removed.append(name)
    return removed


def constant_map_value(state: SDFGState, entry: nodes.MapEntry) -> Optional[float]:
    """The number a map writes everywhere (``out = 0`` in a tasklet without inputs), else None."""
    import re
    inner = [n for n in state.scope_subgraph(entry, include_entry=False, include_exit=False).nodes()]
    if len(inner) != 1 or not isinstance(inner[0], nodes.Tasklet):
        return None
    t = inner[0]
    if any(not e.data.is_empty() for e in state.in_edges(t)) or len(t.out_connectors) != 1:
        return None
    m = re.fullmatch(r"\s*(\w+)\s*=\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*;?\s*", t.code.as_string or "")
    if m is None or m.group(1) not in t.out_connectors:
        return None
    return float(m.group(2))


#: DaCe's loop detection and loop-to-map transformation (distsdfg.analysis.loopmaps subclasses them).
DetectLoop = _loop_detection.DetectLoop
LoopToMap = _loop_to_map.LoopToMap


def find_for_loop(sdfg, guard, begin):
    """DaCe's for-loop detection: ``(itervar, (start, end, step), (start_states, last_loop_state))`` of
    the loop guarded by state ``guard`` whose body begins at ``begin``, or None."""
    return _loop_detection.find_for_loop(sdfg, guard, begin)


def pattern_matches(sdfg: SDFG, transformation) -> list:
    """Every match of ``transformation`` (a transformation class) in ``sdfg``, in DaCe's order."""
    from dace.transformation.optimizer import Optimizer
    return list(Optimizer(sdfg).get_pattern_matches(patterns=[transformation]))


#: Modifies flag of a pass that only changes library nodes' properties (DaCe 1.0.2 has no
#: ``Modifies.LibraryNodes``; library nodes count as code nodes, like tasklets).
MODIFIES_LIBRARY_NODES = getattr(_ppl.Modifies, "LibraryNodes", _ppl.Modifies.Tasklets)
