"""Maps carry the user's source line (DaCe's DebugInfo): in ``maps``, ``plan``, ``explain``, errors
and the step timings' legend; ``explain`` shows a program's element-wise chains as one row each.
Symbolic: nothing is compiled."""
import dace
import numpy as np

import distsdfg
from distsdfg.dace_compat.source import SourceLine, source_line
from distsdfg.planner.explain import map_groups

N = dace.symbol("N")
HERE = "test_source_lines.py"


@dace.program
def heat(T: dace.float64[N, N], S: dace.float64[N, N]):
    Tn = np.zeros_like(T)
    Tn[1:-1, 1:-1] = 0.25 * (T[:-2, 1:-1] + T[2:, 1:-1] + T[1:-1, :-2] + T[1:-1, 2:])
    d = Tn - T
    e = d * d + S
    S[:] = np.exp(e) / 2.0
    T[:] = Tn
    return np.sum(e)


LINE = heat.f.__code__.co_firstlineno + 2       # the line of `Tn = np.zeros_like(T)` (after the decorator and def)


def _by_key():
    return {m.key: m.source for m in distsdfg.maps(heat.to_sdfg())}


def test_every_map_names_its_line_and_text():
    src = _by_key()
    assert src["_numpy_full__map"] == f"{HERE}:{LINE} Tn = np.zeros_like(T)"
    assert src["_Sub__map"] == f"{HERE}:{LINE + 2} d = Tn - T"
    assert src["_Mult__map_2"] == src["_Add__map_4"] == f"{HERE}:{LINE + 3} e = d * d + S"
    # a copy that distsdfg turned into a map takes the line of the array it writes
    assert src["copy_Tn_T_map"] == f"{HERE}:{LINE + 5} T[:] = Tn"
    # a library node's maps take the library node's line
    assert src["Reduce.reduce_values"] == f"{HERE}:{LINE + 6} return np.sum(e)"
    # a long line is cut
    assert src["_Add__map"].startswith(f"{HERE}:{LINE + 1} Tn[1:-1, 1:-1] = 0.25 * (") and src["_Add__map"].endswith("...")


def test_lines_of_dace_and_distsdfg_are_not_the_users():
    class Node:     # a node that DaCe added: its DebugInfo names DaCe's own file
        debuginfo = dace.dtypes.DebugInfo(10, 0, 10, 0, dace.__file__)
    assert source_line(None, Node()) is None
    Node.debuginfo = dace.dtypes.DebugInfo(3, 0, 3, 0, distsdfg.__file__)
    assert source_line(None, Node()) is None
    Node.debuginfo = None
    assert source_line(None, Node()) is None
    assert str(SourceLine("/a/b/prog.py", 7, "x = " + "y + " * 30 + "1")).endswith("...")
    assert len(str(SourceLine("/a/b/prog.py", 7, "x = " + "y + " * 30 + "1"))) == len("prog.py:7 ") + 60


def test_lowering_keeps_the_lines_and_the_step_legend_shows_them():
    from distsdfg.runtime.program import step_legend
    sdfg = heat.to_sdfg()
    distsdfg.lower(sdfg, {"*": (2, 1)})
    low = sdfg._distsdfg
    sources = {k.label: k.source for k in low.kernels}
    assert sources["_Sub__map"] == f"{HERE}:{LINE + 2} d = Tn - T"
    legend = step_legend(low)
    assert f"({HERE}:{LINE + 2} d = Tn - T)" in legend
    assert legend.count("step ") == len(low.steps) and low.steps


def test_explain_groups_element_wise_chains_into_rows():
    sdfg = heat.to_sdfg()
    keys = [m.key for m in distsdfg.maps(sdfg)]
    schedule = {k: (4, 1) for k in keys if k != "Reduce.reduce_init_map"}
    text = distsdfg.explain(sdfg, schedule, N=256)
    rows = [l for l in text.splitlines() if l.startswith("  ") and not l.startswith("   ")][2:]
    # np.zeros_like feeds no map next to it: a row of its own; the rest read one another on one
    # grid and exchange nothing: one chain, one row
    assert len(rows) == 2, text
    assert rows[0].startswith(f"  {HERE}:{LINE} Tn = np.zeros_like(T)")
    assert rows[1].startswith(f"  {HERE}:{LINE + 1}-{LINE + 6} (11 maps)")
    for k in schedule:      # the keys a schedule names are all there, beside their lines
        assert k in text
    assert f"{HERE}:{LINE + 2} d = Tn - T: _Sub__map" in text
    # another grid in the middle of the chain cuts it
    schedule["_Sub__map"] = (1, 4)
    text = distsdfg.explain(sdfg, schedule, N=256)
    assert f"  {HERE}:{LINE + 2} d = Tn - T" in text and f"  {HERE}:{LINE + 3}-{LINE + 4} (4 maps)" in text


def test_map_groups_join_a_line_or_a_chain_that_moves_nothing():
    from distsdfg.analysis.eingraph import build_graph
    g = build_graph(heat.to_sdfg(), N=64)
    n = len(g.vertices)
    same = [(4, 1)] * n
    free = {(e.src, e.dst): 0.0 for e in g.edges}
    assert [len(grp) for grp in map_groups(g, same, free)] == [1, n - 1]      # np.zeros_like feeds no neighbour
    paid = {k: 1.0 for k in free}          # every edge moves data: only maps of one line stay together
    groups = map_groups(g, same, paid)
    assert all(len({v.source for v in grp}) == 1 for grp in groups)
    assert len(groups) == len({v.source for v in g.vertices})
    mixed = [(4, 1) if i % 2 else (1, 4) for i in range(n)]      # alternating grids: nothing joins
    assert len(map_groups(g, mixed, free)) == n


def test_errors_that_name_a_map_quote_its_line():
    import pytest
    with pytest.raises(distsdfg.GridShapeError) as info:
        distsdfg.lower(heat.to_sdfg(), {"_Sub__map": (2,)})
    assert f"map `_Sub__map` ({HERE}:{LINE + 2} d = Tn - T) has 2 parameters" in str(info.value)
    with pytest.raises(distsdfg.UnknownMapError) as info:
        distsdfg.lower(heat.to_sdfg(), {"_Sub__mapp": (2, 1)})
    assert f"did you mean `_Sub__map` ({HERE}:{LINE + 2} d = Tn - T)?" in str(info.value)
