"""DaCe 2.0: the names of DaCe 1.0.2's API that distsdfg calls and DaCe 2.0 renamed, given back under
their 1.0.2 names (nothing happens under DaCe 1.x). DaCe 2.0's ``ControlFlowRegion.states()`` recurses
into nested regions, as 1.0.2's ``all_states()`` did; ``subsets.Indices`` is gone (points are Ranges)."""
from __future__ import annotations

__all__ = ["DACE_MAJOR", "install"]

import dace

DACE_MAJOR = int(dace.__version__.split(".")[0])


def install() -> None:
    if DACE_MAJOR < 2:
        return
    from dace.sdfg.state import ControlFlowRegion
    if not hasattr(ControlFlowRegion, "all_states"):
        ControlFlowRegion.all_states = ControlFlowRegion.states
    from dace import subsets
    if not hasattr(subsets, "Indices"):      # every subset is a Range in 2.0: `isinstance(s, Indices)` is False
        subsets.Indices = type("Indices", (subsets.Subset,), {"__doc__": "DaCe 1.x's point subset; none in 2.0."})
