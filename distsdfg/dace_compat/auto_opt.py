"""DaCe's CPU ``auto_optimize`` sequence with the BLAS distsdfg configured.

``dace.transformation.auto.auto_optimize.auto_optimize`` picks the first BLAS DaCe itself detects
(MKL before OpenBLAS, and neither when the BLAS is SciPy's ``scipy-openblas32``); the program a
DaCe user builds with it runs the same transformations, which this module applies in the same
order, except that matrix products and LAPACK calls keep the implementation
``distsdfg.lowering.blas`` chose, and plain reductions expand to the sequential form whose inner
loop vectorizes (``sequential_reduce``) before the library nodes are expanded.
"""
from __future__ import annotations

from typing import Callable, Optional

import dace
from dace.sdfg import SDFG, nodes

__all__ = ["auto_optimize_cpu", "fuse_maps_greedily", "fused_in_place"]

_VENDOR_BLAS = ("MKL", "OpenBLAS", "cuBLAS", "rocBLAS")


def _keep_blas(sdfg: SDFG, implementation: str) -> int:
    """Every library node that has ``implementation`` (a BLAS or LAPACK node) takes it; returns how many."""
    n = 0
    for node, _ in sdfg.all_nodes_recursive():
        if isinstance(node, nodes.LibraryNode) and implementation in getattr(node, "implementations", {}):
            node.implementation = implementation
            n += 1
    return n


def _greedy_fusion(sdfg: SDFG) -> None:
    """DaCe's greedy subgraph fusion of producer-consumer chains, then of stencils (``auto_optimize``'s order)."""
    from dace.transformation.auto import auto_optimize as ao
    cpu = dace.DeviceType.CPU
    ao.greedy_fuse(sdfg, device=cpu, validate_all=False)
    ao.greedy_fuse(sdfg, device=cpu, validate_all=False, recursive=False, stencil=True)


def auto_optimize_cpu(sdfg: SDFG, *, blas: Optional[str] = None,
                      before_expansion: Optional[Callable[[SDFG], None]] = None) -> SDFG:
    """DaCe's ``auto_optimize(sdfg, DeviceType.CPU)`` in place, with ``blas`` (an implementation name
    such as "OpenBLAS" or "MKL"; None: DaCe's reference code) for every BLAS/LAPACK node, and
    ``before_expansion(sdfg)`` called just before the library nodes expand. Raises what DaCe raises."""
    from dace.transformation.auto import auto_optimize as ao
    from dace.transformation.dataflow import MapCollapse, TrivialMapElimination
    from dace.transformation.interstate import LoopToMap, MoveLoopIntoMap, RefineNestedAccess
    from dace.transformation import helpers as xfh
    from dace.sdfg import infer_types

    cpu = dace.DeviceType.CPU
    # 1. Parallelism: trivial maps gone, loops without carried values become maps, maps collapsed.
    sdfg.apply_transformations_repeated(TrivialMapElimination, validate=False)
    while True:
        sdfg.simplify(validate=False)
        for cfg in sdfg.cfg_list:
            xfh.split_interstate_edges(cfg)
        if sdfg.apply_transformations_repeated((LoopToMap, RefineNestedAccess), validate=False) == 0:
            break
    sdfg.simplify(validate=False)
    sdfg.apply_transformations_repeated(MapCollapse, validate=False)
    # 2. Fusion: producer-consumer chains and stencils, loops moved into maps.
    _greedy_fusion(sdfg)
    sdfg.apply_transformations_repeated([MoveLoopIntoMap])
    # 3. Write-conflict resolution tiled, maps collapsed again.
    for nsdfg in list(sdfg.all_sdfgs_recursive()):
        ao.tile_wcrs(nsdfg, False)
    sdfg.apply_transformations_repeated(MapCollapse, validate=False)
    # 4. Library nodes: DaCe's fast implementations, the configured BLAS, then expanded.
    ao.set_fast_implementations(sdfg, cpu, blocklist=list(_VENDOR_BLAS))
    if blas and blas != "pure":
        _keep_blas(sdfg, blas)
    if before_expansion is not None:
        before_expansion(sdfg)
    infer_types.infer_connector_types(sdfg)
    infer_types.set_default_schedule_and_storage_types(sdfg, None)
    sdfg.expand_library_nodes()
    # 5. Memory: no OpenMP sections, small arrays on the stack, transients allocated once.
    for nsdfg in sdfg.all_sdfgs_recursive():
        nsdfg.openmp_sections = False
    ao.move_small_arrays_to_stack(sdfg)
    ao.make_transients_persistent(sdfg, cpu)
    sdfg.validate()
    return sdfg


def fuse_maps_greedily(sdfg: SDFG) -> SDFG:
    """The fusion part of ``auto_optimize`` (trivial maps removed, ``simplify``, DaCe's greedy
    subgraph fusion of producer-consumer chains and of stencils), in place; library nodes are kept.
    Raises what DaCe raises (the SDFG may then be half transformed: call it on a copy)."""
    from dace.transformation.dataflow import TrivialMapElimination

    sdfg.apply_transformations_repeated(TrivialMapElimination, validate=False)
    sdfg.simplify(validate=False)
    _greedy_fusion(sdfg)
    sdfg.validate()
    return sdfg


def fused_in_place(sdfg: SDFG) -> Optional[SDFG]:
    """``fuse_maps_greedily`` on ``sdfg`` in place; returns a copy of the program as written when that
    fused any map, else None with ``sdfg`` as it was (also where DaCe raises)."""
    import copy

    from .fusion import copy_into

    def n_maps(g):
        return sum(isinstance(n, nodes.MapEntry) for n, _ in g.all_nodes_recursive())
    written = copy.deepcopy(sdfg)
    try:
        fuse_maps_greedily(sdfg)
        fused = n_maps(sdfg) < n_maps(written)
    except Exception:       # DaCe's transformations: the program stays as written
        fused = False
    if not fused:
        copy_into(sdfg, written)
        return None
    return written
