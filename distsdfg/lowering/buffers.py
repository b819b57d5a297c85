"""Host buffers of the communication steps allocated once per program, not on every call.

DaCe allocates a transient with the default lifetime with ``new[]`` when the program's call
enters its scope and frees it when it leaves. The ranks' local blocks that the steps fill or
read (``__dsdfg_*`` buffers: scattered blocks, received operands, partial results, home
buffers) are megabytes each, so glibc serves them from fresh pages and gives those back to the
kernel when the call frees them (its trim threshold follows the largest freed block): a
program whose buffers together exceed about twice its largest one page-faults on every byte of
every buffer on every call (the element-wise chain at n = 4M on 2 ranks: 11,700 minor faults,
46 MB, per call on rank 1). A persistent buffer is allocated when the program is initialised
and kept; the runtime initialises the program anew when the sizes it depends on change
(``runtime.program``, ``_reinitialise_if_sizes_changed``). The cost: the buffers stay
allocated between calls (one call's peak of local blocks).

The initialisation takes every symbol a persistent buffer's shape uses as an argument of its
own, so those per-rank symbols (block shapes ``__dsdfg_h<i>_s<d>``) cannot be packed into one
array (``dace_compat.pack``). A program whose buffers would together use more of them than the
packing threshold persists only the buffers that fit within it, those with the fewest per-rank
symbols first; the others are allocated per call, so the call stays within ctypes' 1,024
arguments (a GPT training step in distributed placement has over a thousand such symbols).
"""
from __future__ import annotations

from dace import data as dt
from dace import dtypes
from dace.sdfg import SDFG

from ..dace_compat.pack import threshold
from ..mpi import DistributedMemlet

__all__ = ["persist", "persist_step_buffers", "program_symbols"]


def persist(sdfg: SDFG, desc: dt.Array, known: set[str] | None = None) -> bool:
    """Allocate ``desc`` once, when the program is initialised, if its sizes are ones the
    initialisation knows (the program's free symbols; ``known``, when the caller has them: they
    cost a walk of the whole SDFG, and making a buffer persistent does not change them).
    Whether it was made persistent."""
    if known is None:
        known = program_symbols(sdfg)
    if {str(s) for s in desc.free_symbols} <= known:
        desc.lifetime = dtypes.AllocationLifetime.Persistent
        return True
    return False


def program_symbols(sdfg: SDFG) -> set[str]:
    """The names of the symbols the program's initialisation knows: its free symbols."""
    return {str(s) for s in sdfg.free_symbols}


#: The names of the local blocks the lowering adds (``rewriter._local_name``).
LOCAL_PREFIX = "__dsdfg_"

_HOST = (dtypes.StorageType.Default, dtypes.StorageType.CPU_Heap)


def persist_step_buffers(sdfg: SDFG) -> int:
    """Make the ranks' local blocks persistent: every host transient array of ``sdfg`` (top level)
    that a ``DistributedMemlet`` reads or writes, and every other local block the lowering made
    (``__dsdfg_*``: a kernel's output that the next kernel reads in place). The number made so."""
    names = {n for n in sdfg.arrays if n.startswith(LOCAL_PREFIX)}
    for state in sdfg.all_states():
        if state.sdfg is not sdfg:
            continue
        for node in state.nodes():
            if isinstance(node, DistributedMemlet):
                for e in state.all_edges(node):
                    if not e.data.is_empty() and e.data.data in sdfg.arrays:
                        names.add(e.data.data)
    known = program_symbols(sdfg)
    candidates = []
    for name in sorted(names):
        desc = sdfg.arrays[name]
        if (isinstance(desc, dt.Array) and not isinstance(desc, dt.View) and desc.transient
                and desc.storage in _HOST and desc.lifetime == dtypes.AllocationLifetime.Scope
                and {str(s) for s in desc.free_symbols} <= known):
            candidates.append((name, desc, {str(s) for s in desc.free_symbols if str(s).startswith(LOCAL_PREFIX)}))
    # Within the budget of per-rank symbols: buffers needing the fewest first, then by name.
    budget, used, count = threshold(), set(), 0
    for name, desc, rank_syms in sorted(candidates, key=lambda c: (len(c[2]), c[0])):
        if len(used | rank_syms) > budget:
            continue
        used |= rank_syms
        count += persist(sdfg, desc, known)
    return count
