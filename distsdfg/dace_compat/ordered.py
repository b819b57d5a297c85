"""DaCe 1.0.2 determinism fix (part of the ``dace_compat`` layer): ``simplify()`` rewrites a program
the same way whatever Python's string-hash seed (``PYTHONHASHSEED``).

DaCe's ``ArrayElimination`` pass (run by every ``simplify()``, hence by every ``to_sdfg()``) tries
to remove redundant copies and views array by array, iterating over a ``set`` of array names. A
set of strings is ordered by the strings' hashes, which Python salts per process; where two
removals compete for one access node, the first one wins, so two processes that parse the same
program can get different SDFGs (other transients, other access nodes, other edges). Every rank
traces and lowers its program itself, so ranks started with different seeds (mpiexec starts each
with its own) then lowered different programs and disagreed about the communication steps.

``install(patches)`` makes the pass visit the names in sorted order (the same rewrites, in one order)
inside ``numpy_semantics()`` (``semantics.py``), where distsdfg parses, plans and lowers. A program a
user parses outside that block on every rank (``prog.to_sdfg()`` under ``mpiexec``) may still differ
between ranks: ``distsdfg.runtime.fingerprint`` compares the ranks' lowerings before a program's first
call and raises ``PlanMismatchError`` on every rank (parse inside ``distsdfg.numpy_semantics()``, or
launch with one ``PYTHONHASHSEED``).

Example: the transformers BERT training step parsed with ``PYTHONHASHSEED=1`` and ``=2`` gave 726
and 727 communication steps on 4 ranks before this fix, the same 726 after it.
"""
from __future__ import annotations

__all__ = ["install"]


def install(patches) -> None:
    """Make ``ArrayElimination`` visit array names in sorted order for a ``numpy_semantics()`` block."""
    from dace.transformation.passes.array_elimination import ArrayElimination
    original = ArrayElimination.remove_redundant_copies

    def remove_redundant_copies(self, sdfg, state, removable_data, access_nodes):
        return original(self, sdfg, state, sorted(removable_data), access_nodes)

    remove_redundant_copies.__doc__ = original.__doc__
    patches.set(ArrayElimination, "remove_redundant_copies", remove_redundant_copies)
