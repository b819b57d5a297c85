"""Rank-local optimisation of a lowered SDFG: the kernels each rank runs, not what moves between ranks.

``lower`` calls ``optimize_lowered`` after rank tiling (``lower(..., optimize=False)`` or
``DISTSDFG_OPTIMIZE=0`` turns it off). The communication plan is fixed by then: every
``DistributedMemlet`` keeps the buffers it reads and writes, and a buffer some step or
another state uses is never removed. What changes:

Steps 1 and 2 apply to straight-line programs with root placement (see ``optimize_lowered``).

1. Kernels on the same process grid share their rank-coordinate symbols (a rank has the same
   coordinates in equal grids), so their tiled map ranges become equal expressions.
2. DaCe's ``MapFusion`` merges chains of element-wise maps with equal ranges; a local buffer
   only the fused maps used disappears (one pass over memory instead of one per operation).
3. ``Reduce`` library nodes expand to DaCe's ``pure-seq`` implementation (a map over the kept
   axes around a sequential loop over the reduced ones), several times faster than the
   default ``pure`` expansion, which accumulates every element through a write-conflict
   resolution.
"""
from __future__ import annotations

import os
import warnings
from typing import Dict, List

from dace.sdfg import SDFG

__all__ = ["optimize_lowered", "enabled"]


def enabled(optimize) -> bool:
    """``optimize`` as given to ``lower`` (None: on unless ``DISTSDFG_OPTIMIZE=0``)."""
    if optimize is None:
        return os.environ.get("DISTSDFG_OPTIMIZE", "1") not in ("", "0")
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
        with warnings.catch_warnings():     # the shared symbol exists already: that is the point
            warnings.simplefilter("ignore", UserWarning)
            sdfg.replace_dict(mapping)
        for old in mapping:
            if old in sdfg.symbols:
                sdfg.remove_symbol(old)
    return mapping


def fuse_maps(sdfg: SDFG) -> int:
    """Fuse producer-consumer chains of maps with equal ranges (DaCe's MapFusion); returns how many."""
    from dace.transformation.dataflow import MapFusion
    return sdfg.apply_transformations_repeated(MapFusion, validate=False, print_report=False)


def fast_reductions(sdfg: SDFG) -> int:
    """Give every plain ``Reduce`` node the ``pure-seq`` expansion; returns how many changed."""
    from dace.libraries.standard import Reduce
    n = 0
    for node, state in sdfg.all_nodes_recursive():
        if not isinstance(node, Reduce) or node.implementation not in (None, "pure"):
            continue
        if node.identity is None:       # pure-seq needs the identity to start from
            continue
        outs = state.out_edges(node)
        if len(outs) != 1 or outs[0].data.wcr is not None:
            continue
        node.implementation = "pure-seq"
        n += 1
    return n


def optimize_lowered(sdfg: SDFG, low, *, straight: bool) -> Dict[str, int]:
    """Optimise the ranks' kernels of a lowered CPU program in place; returns what was done.

    ``straight``: a program without loops, branches or distributed placement. Only those are
    fused: DaCe 1.0.2's MapFusion leaves invalid SDFGs behind on stencils in loops (home
    buffers), so programs with home buffers keep their maps (reductions are still expanded
    faster). Fusion is tried on a copy first and skipped if the copy does not validate."""
    from . import dace_compat as dc
    done = {"shared_symbols": 0, "fused": 0}
    if straight and not low.homes and not low.boundary:
        import copy

        from dace.sdfg.validation import InvalidSDFGError
        trial = copy.deepcopy(sdfg)
        trial_kernels = copy.deepcopy(low.kernels)
        share_rank_symbols(trial, trial_kernels)
        try:
            ok = fuse_maps(trial) > 0
            trial.validate()
        except (InvalidSDFGError, ValueError, KeyError):
            ok = False
        if ok:
            before = set(sdfg.arrays)
            done["shared_symbols"] = len(share_rank_symbols(sdfg, low.kernels))
            done["fused"] = fuse_maps(sdfg)
            dc.remove_unused_transients(sdfg, before)
    done["reductions"] = fast_reductions(sdfg)
    return done
