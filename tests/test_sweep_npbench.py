"""Unit tier for npbench-style kernels that once failed (``distsdfg.testing.sweep_npbench``): what the lowering
plans, nothing compiled. The same programs run under mpiexec in ``test_mpi.py``."""
import distsdfg
from distsdfg.testing.programs import get


def _steps(name, schedule):
    sdfg = get(name).sdfg()
    distsdfg.lower(sdfg, schedule)
    return [(s.kind, s.array) for s in sdfg._distsdfg.steps]


def test_a_map_result_read_through_a_reshape_view_on_rank_0_is_gathered():
    # The einsum 'kij,k->ij' stays on rank 0 (complex MatMul) and reads G * D through the view
    # (4, 36) of the map's transient result: the map's blocks must come back to rank 0 first.
    for grid in ((1, 1, 1), (2, 1, 1), (1, 1, 3)):
        steps = _steps("weighted_product", {"_Mult__map": grid})
        assert [k for k, _ in steps] == ["scatter", "scatter", "gather"], steps
        assert steps[2][1].startswith("__tmp"), steps        # the product, not an argument


def test_a_matrix_vector_product_with_a_contraction_block_of_one_is_misread_by_dace():
    from distsdfg.dace_compat.matmul import misread_by_dace, vector_product
    assert vector_product([3, 1], [1], [3]) == "mv" and vector_product([1], [1, 3], [3]) == "vm"
    assert misread_by_dace([3, 1], [1], [3]) and misread_by_dace([1], [1, 3], [3])
    assert misread_by_dace([1, 1], [1], [1])
    assert not misread_by_dace([3, 2], [2], [3]) and not misread_by_dace([2], [2, 3], [3])
    assert not misread_by_dace([1, 2], [2], [1])          # one row: a dot product into one element


def test_a_split_matrix_vector_product_becomes_maps_where_dace_would_misread_it():
    for name in ("short_matvec", "short_vecmat"):
        sdfg = get(name).sdfg()
        distsdfg.lower(sdfg, {"_MatMult_._GEMV__map": (1, 2)}, nprocs=2)
        kinds = {type(n).__name__ for n, _ in sdfg.all_nodes_recursive()}
        labels = {n.label for n, _ in sdfg.all_nodes_recursive() if type(n).__name__ == "MapEntry"}
        assert "MatMul" not in kinds, (name, kinds)
        assert any(lb.endswith("_products_map") for lb in labels), (name, labels)


def test_the_gather_before_a_write_through_a_view_is_ordered_before_its_writer():
    # Distributed placement: rank 0 gathers the result's blocks into its whole copy before the
    # einsum writes it through the view (1, 36); the order went into the view node alone, so
    # the gather could run after the einsum and overwrite its result (relative error 1.0).
    import networkx as nx
    from distsdfg.mpi import DistributedMemlet
    sdfg = get("weighted_product").sdfg()
    distsdfg.lower(sdfg, {"_Mult__map": (2, 1, 1)}, placement="distributed", nprocs=2)
    seen = 0
    for state in sdfg.states():
        einsums = [n for n in state.nodes() if type(n).__name__ == "MatMul"]
        for mm in einsums:
            for dm in (n for n in state.nodes() if isinstance(n, DistributedMemlet)):
                seen += 1
                assert nx.has_path(state.nx, dm, mm) or nx.has_path(state.nx, mm, dm), dm.label
    assert seen >= 3


def test_a_complex_scalar_argument_becomes_a_one_element_array_and_the_call_boxes_the_number():
    """DaCe 1.0.2 passes a complex scalar argument as a long double (garbage): the lowering makes it a
    one-element array of the same dtype and the call turns the caller's number into one."""
    import dace
    import numpy as np
    from distsdfg.dace_compat.scalars import box_arguments
    from distsdfg.testing.sweep_npbench import complex_scalar
    sdfg = complex_scalar.to_sdfg()
    assert isinstance(sdfg.arrays["s"], dace.data.Scalar)
    distsdfg.lower(sdfg, {"_Mult__map": (2, 1)})
    assert sdfg._distsdfg.boxed == ("s",)
    desc = sdfg.arrays["s"]
    assert isinstance(desc, dace.data.Array) and tuple(desc.shape) == (1,) and desc.dtype == dace.complex128
    assert [a.array for a in sdfg._distsdfg.steps if a.array == "s"], "s is sent from rank 0 like any input"
    kwargs = {"H": np.zeros((5, 5), complex), "s": 0.3 + 0.7j}
    box_arguments(kwargs, ("s",), sdfg)
    assert kwargs["s"].dtype == np.complex128 and kwargs["s"].tolist() == [0.3 + 0.7j] and kwargs["s"].base is None
    kwargs = {"s": np.complex64(2j)}
    box_arguments(kwargs, ("s",), sdfg)
    assert kwargs["s"].shape == (1,) and kwargs["s"][0] == 2j
    kwargs = {"s": np.array(1 + 1j)}                              # a 0-d array, as DaCe takes for a scalar
    box_arguments(kwargs, ("s",), sdfg)
    assert kwargs["s"].shape == (1,) and kwargs["s"][0] == 1 + 1j
    assert kwargs["s"].base is None          # not a view: DaCe refuses views as arguments
    # the JSON kept to lower again (another placement) still has the scalar, boxed again there
    from distsdfg import dace_compat as dc
    again = dc.from_json(sdfg._distsdfg.source)
    assert isinstance(again.arrays["s"], dace.data.Scalar)
    sdfg = get("complex_factor").sdfg()
    distsdfg.lower(sdfg, {"_Mult__map": (2, 1)})        # the array form lowers as before
    assert sdfg._distsdfg.boxed == ()