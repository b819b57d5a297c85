"""DaCe 1.0.2 determinism fix (part of the ``dace_compat`` layer): ``simplify()`` rewrites a program
the same way whatever Python's string-hash seed (``PYTHONHASHSEED``).

DaCe's ``ArrayElimination`` pass (run by every ``simplify()``, hence by every ``to_sdfg()``) tries
to remove redundant copies and views array by array, iterating over a ``set`` of array names. A
set of strings is ordered by the strings' hashes, which Python salts per process; where two
removals compete for one access node, the first one wins, so two processes that parse the same
program can get different SDFGs (other transients, other access nodes, other edges). Every rank
traces and lowers its program itself, so ranks started with different seeds (mpiexec starts each
with its own) then lowered different programs and disagreed about the communication steps.

``ordered_array_elimination()`` (called when distsdfg is imported, as a program is usually parsed
after that) makes the pass visit the names in sorted order: the same rewrites, in one order.
``distsdfg.runtime.fingerprint`` still compares the ranks' lowerings before a program's first call.

Example: the transformers BERT training step parsed with ``PYTHONHASHSEED=1`` and ``=2`` gave 726
and 727 communication steps on 4 ranks before this fix, the same 726 after it.
"""
from __future__ import annotations

__all__ = ["ordered_array_elimination"]

_installed = {}


def ordered_array_elimination() -> None:
    """Install the fix (idempotent)."""
    if _installed:
        return
    from dace.transformation.passes.array_elimination import ArrayElimination
    original = ArrayElimination.remove_redundant_copies

    def remove_redundant_copies(self, sdfg, state, removable_data, access_nodes):
        return original(self, sdfg, state, sorted(removable_data), access_nodes)

    remove_redundant_copies.__doc__ = original.__doc__
    ArrayElimination.remove_redundant_copies = remove_redundant_copies
    _installed["ArrayElimination.remove_redundant_copies"] = original
