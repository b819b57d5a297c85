"""Adapter: every DaCe-version-sensitive call (written against dace 1.0.2) lives here."""
from __future__ import annotations

import copy
import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import dace
import sympy
from dace import data as dt
from dace import dtypes, subsets, symbolic
from dace.sdfg import SDFG, SDFGState, nodes
from dace.sdfg import propagation as _propagation
from dace.sdfg import utils as sdutil

__all__ = [
    "simplify", "repair_init_accumulate_races", "propagate", "reduction_op", "force_pure_expansion",
    "standalone_expansion", "top_level_nodes", "all_states", "pystr", "sym", "int_ceil", "Min",
]

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


def simplify(sdfg: SDFG) -> SDFG:
    """DaCe's simplify() followed by our repair of its known miscompilations."""
    sdfg.simplify()
    repair_init_accumulate_races(sdfg)
    return sdfg


def repair_init_accumulate_races(sdfg: SDFG) -> int:
    """Order a constant initialisation before other writes of the same data inside one scope.

    DaCe 1.0.2's ``simplify()`` fuses ``b[i] = 0`` and a nested accumulation map
    ``b[i] += ...`` (the CSR SpMV) into one scope with no edge between them, so the
    generated code may accumulate before initialising. The program initialises first, so
    we add an empty-memlet edge from the initialising tasklet (one with no data inputs) to
    every other writer of that data in the scope. Returns the number of edges added.
    """
    added = 0
    for state in sdfg.all_states():
        sd = state.scope_dict()
        for ex in [n for n in state.nodes() if isinstance(n, nodes.ExitNode)]:
            writers = {}
            for e in state.in_edges(ex):
                if not e.data.is_empty():
                    writers.setdefault(e.data.data, []).append(e.src)
            for data, ws in writers.items():
                inits = [w for w in ws if isinstance(w, nodes.Tasklet)
                         and all(ie.data.is_empty() for ie in state.in_edges(w))]
                for w in inits:
                    for other in ws:
                        target = state.entry_node(other) if isinstance(other, nodes.ExitNode) else other
                        if other is w or target is None or sd.get(target) is not sd.get(w):
                            continue
                        if _has_path(state, w, target) or _has_path(state, target, w):
                            continue
                        state.add_nedge(w, target, dace.Memlet())
                        added += 1
    return added


def _has_path(state: SDFGState, a, b) -> bool:
    import networkx as nx
    return nx.has_path(state.nx, a, b)


def propagate(memlets: Sequence[dace.Memlet], arr: dt.Data, params: Sequence[str],
              rng: subsets.Range) -> dace.Memlet:
    """Image of ``memlets`` over the iteration range ``rng`` of ``params``."""
    defined = set(rng.free_symbols)
    for m in memlets:
        defined |= set(m.free_symbols)
    defined -= set(params)
    defined = set(symbolic.pystr_to_symbolic(p) for p in defined)
    return _propagation.propagate_subset(list(memlets), arr, list(params), rng, defined_variables=defined)


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


def force_pure_expansion(sdfg: SDFG, max_rounds: int = 16) -> None:
    """Expand every library node to its pure (map-based) implementation, recursively."""
    for _ in range(max_rounds):
        libs = [(n, st) for n, st in sdfg.all_nodes_recursive() if isinstance(n, nodes.LibraryNode)]
        if not libs:
            return
        for node, state in libs:
            impls = getattr(node, "implementations", {})
            for name in ("pure", "specialize"):
                if name in impls:
                    node.implementation = name
                    break
            node.expand(state.parent, state)
    raise RuntimeError("library nodes keep expanding into library nodes")


def standalone_expansion(sdfg: SDFG, state: SDFGState, node: nodes.LibraryNode) -> SDFG:
    """A fresh SDFG holding only ``node`` and its arrays, expanded to pure maps and simplified.

    The arrays keep the names they have in ``sdfg``, so the maps of the expansion read
    and write the same names as the library node's memlets.
    """
    sub = SDFG(f"analysis_{node.label}")
    for name, stype in sdfg.symbols.items():
        sub.add_symbol(name, stype)
    st = sub.add_state("analysis")
    new = copy.deepcopy(node)
    st.add_node(new)

    def add(name):
        if name not in sub.arrays:
            desc = sdfg.arrays[name]
            if isinstance(desc, (dt.View, dt.Scalar)) or type(desc) is not dt.Array:
                # A view without its viewed array is invalid on its own: analyse it as a plain array.
                sub.add_array(name, desc.shape, desc.dtype, strides=getattr(desc, "strides", None))
            else:
                desc = copy.deepcopy(desc)
                desc.transient = False
                sub.add_datadesc(name, desc)

    for e in state.in_edges(node):
        if e.data.is_empty():
            continue
        add(e.data.data)
        st.add_edge(st.add_read(e.data.data), None, new, e.dst_conn, copy.deepcopy(e.data))
    for e in state.out_edges(node):
        if e.data.is_empty():
            continue
        add(e.data.data)
        st.add_edge(new, e.src_conn, st.add_write(e.data.data), None, copy.deepcopy(e.data))
    force_pure_expansion(sub)
    from dace.transformation.interstate import InlineSDFG
    sub.simplify()
    sub.apply_transformations_repeated(InlineSDFG, validate=False)
    repair_init_accumulate_races(sub)
    return sub


def scope_edges(state: SDFGState, entry: nodes.MapEntry):
    """All edges strictly inside the scope of ``entry`` (between its entry and exit)."""
    sub = state.scope_subgraph(entry, include_entry=True, include_exit=True)
    return list(sub.edges())


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


def mpi_bin_dir() -> Optional[str]:
    """Folder of the bundled MPI's executables (the venv's bin), if present."""
    import sys
    cand = os.path.join(sys.prefix, "bin")
    if os.path.exists(os.path.join(cand, "mpiexec")):
        return cand
    import shutil
    exe = shutil.which("mpiexec")
    return os.path.dirname(exe) if exe else None


def ensure_mpi_on_path() -> None:
    """CMake finds the PyPI MPI only with the venv's bin on PATH."""
    b = mpi_bin_dir()
    if b and b not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = b + os.pathsep + os.environ.get("PATH", "")
