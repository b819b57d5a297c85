"""A slice of extent one keeps its dimension (NumPy's shape), where DaCe 1.0.2's parser squeezed it
like an index (``distsdfg.dace_compat.slices``). Symbolic: the parsed SDFGs' shapes, nothing compiled;
``pair_differences`` runs under mpiexec in ``test_mpi.py``."""
import ast

import dace
import numpy as np
import pytest

from distsdfg.dace_compat.slices import sliced_dimensions  # importing distsdfg installs the fix

N = dace.symbol("N")


def _shapes(prog):
    sdfg = prog.to_sdfg()
    return {n: tuple(str(s) for s in d.shape) for n, d in sdfg.arrays.items() if n.startswith("__return")}


def _index(text):
    return ast.parse(f"A[{text}]", mode="eval").body.slice


@pytest.mark.parametrize("text,ndim,expected", [
    (":, 0:1", 2, [True, True]),
    (":, 0", 2, [True, False]),
    ("k, 1:2", 2, [False, True]),
    ("None, 0:1, 1", 2, [True, False]),
    ("..., 2:3", 3, [True, True, True]),
    ("0, ...", 3, [False, True, True]),
    ("i + 1", 2, [False, True]),
    ("-1", 1, [False]),
    ("f(x), 0:1", 2, None),            # a call may return a slice or a tuple: DaCe decides
    ("0, 1, 2", 2, None),              # more entries than dimensions
    ("..., 0, ...", 3, None),
])
def test_sliced_dimensions_read_from_the_syntax(text, ndim, expected):
    assert sliced_dimensions(_index(text), ndim) == expected


def test_a_slice_of_extent_one_keeps_its_dimension():
    @dace.program
    def slices(pos: dace.float64[N, 3], k: dace.int64):
        return pos[:, 0:1], pos[:, 0], pos[k, 1:2], pos[None, 0:1, 1], pos[0:1], pos[..., 2:3]

    assert list(_shapes(slices).values()) == [("N", "1"), ("N",), ("1",), ("1", "1"), ("1", "3"), ("N", "1")]


def test_pairwise_differences_broadcast_to_a_matrix():
    # x.T - x of an (N, 1) column: (N, N), where DaCe 1.0.2 gave (N,) - (N,) (zeros); the
    # transposes of (N, 1) and (1, N) are copy maps (DaCe's Transpose node refuses them).
    @dace.program
    def pairwise(pos: dace.float64[N, 3]):
        x = pos[:, 0:1]
        return x.T - x, np.transpose(x), pos[0:1, :].transpose()

    assert list(_shapes(pairwise).values()) == [("N", "N"), ("1", "N"), ("3", "1")]
    sdfg = pairwise.to_sdfg()
    maps = [n.map.label for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.MapEntry)]
    assert sum(label.startswith("transpose_unit") for label in maps) == 3
    assert not [n for n, _ in sdfg.all_nodes_recursive() if type(n).__name__ == "Transpose"]


def test_squeezing_writes_and_indices_are_dace_s_own():
    # Writes through a size-one slice, integer indices and index expressions parse as before.
    @dace.program
    def writes(A: dace.float64[N, 3], i: dace.int64):
        A[:, 0:1] = A[:, 1:2] + A[:, 2:3]
        A[0:1, :] = A[1:2, :] * 3
        return A[i, 0] + A[i + 1, 2]

    assert list(_shapes(writes).values()) == [("1",)]


def test_symbolic_extents_are_not_squeezed_either():
    # A[i:i + 1] in a loop has extent one for every i: it keeps its dimension.
    @dace.program
    def rows(A: dace.float64[9, 4]):
        for i in range(1, 9):
            A[i:i + 1, :] = A[i - 1:i, :] * 0.5 + A[i:i + 1, :]

    sdfg = rows.to_sdfg(simplify=False)
    views = {tuple(str(s) for s in d.shape) for d in sdfg.arrays.values() if isinstance(d, dace.data.View)}
    assert ("1", "4") in views


def test_a_nested_call_with_a_column_gets_the_column_strides():
    # inner(A[:, 1:2]) with a parameter [L, 1]: DaCe 1.0.2 left the parameter contiguous, (1, 1)
    # ("Incompatible strides"), so the callee read A[0:N, 1] as consecutive elements of row 0
    # (silent, with DaCe alone too). The parameter gets the column's strides (M, 1); M, a symbol of
    # the caller only, is passed to the callee.
    L = dace.symbol("L")
    M = dace.symbol("M")

    @dace.program
    def scale(x: dace.float64[L, 1], y: dace.float64[L, 1]):
        y[:] = x * 2.0

    @dace.program
    def caller(A: dace.float64[N, M], out: dace.float64[N, M]):
        scale(A[:, 1:2], out[:, 3:4])

    sdfg = caller.to_sdfg(simplify=False)
    nested = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.NestedSDFG)]
    assert len(nested) == 1
    inner = nested[0].sdfg.arrays
    assert [tuple(str(s) for s in inner[k].strides) for k in ("x", "y")] == [("M", "1"), ("M", "1")]
    assert str(nested[0].symbol_mapping["M"]) == "M"


@pytest.mark.parametrize("outer,subset,inner,mapping,expected", [
    ((7, 5), "0:7, 1:2", (7, 1), {}, (5, 1)),           # a column: the outer strides
    ((7, 5), "2:3, 0:5", (1, 5), {}, None),             # a row: DaCe's (5, 1) already addresses it
    ((7, 5), "0:7, 1", (7,), {}, None),                 # a squeezed index: DaCe's own rule
    ((7, 5), "0:7, 0:5", (7, 5), {}, None),             # no dimension of one
    ((7, 5), "0:7, 1:2", (1, 7), {}, None),             # a reshaping call: DaCe decides
])
def test_argument_strides_table(outer, subset, inner, mapping, expected):
    from dace import subsets
    from distsdfg.dace_compat.slices import argument_strides
    sdfg = dace.SDFG("t")
    sdfg.add_array("A", outer, dace.float64)
    _, idesc = dace.SDFG("u").add_array("x", inner, dace.float64)
    got = argument_strides(sdfg.arrays["A"], subsets.Range.from_string(subset), idesc, mapping)
    assert (None if got is None else tuple(int(s) for s in got)) == expected
