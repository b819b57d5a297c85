"""Calls that must be refused before anything runs (single process, one compile)."""
import numpy as np
import pytest

import distsdfg
from distsdfg.errors import CommunicatorSizeError, InputError


@pytest.fixture(scope="module")
def add_prog():
    from distsdfg.testing.programs import get
    sdfg = get("add3d").sdfg()
    distsdfg.lower(sdfg, {distsdfg.maps(sdfg)[0].key: (1, 1, 1)})
    return distsdfg.compile(sdfg)


def test_single_rank_run_is_correct(add_prog):
    x, y = np.random.rand(4, 8, 16), np.random.rand(8, 16)
    np.testing.assert_allclose(add_prog(x=x, y=y), x + y, rtol=1e-12)


def test_warm_calls_skip_daces_argument_checks_with_the_same_results(add_prog):
    """After the first call, arguments go to the binary from a record of its signature
    (``dace_compat.call_compiled``): new arrays, new results, no copy of the last call's."""
    add_prog(x=np.zeros((4, 8, 16)), y=np.zeros((8, 16)))
    assert add_prog._compiled._distsdfg_args is not None     # the warm calls below take the record
    outs = []
    for k in range(3):
        x, y = np.random.rand(4, 8, 16), np.full((8, 16), float(k))
        outs.append(add_prog(x=x, y=y))
        np.testing.assert_allclose(outs[-1], x + y, rtol=1e-12)
    assert outs[0] is not outs[1] and not np.shares_memory(outs[0], outs[1])     # results are handed over


def test_wrong_shape(add_prog):
    with pytest.raises(InputError, match=r"shape \(4, 8\) but the program expects \(4, 8, 16\)"):
        add_prog(x=np.zeros((4, 8)), y=np.zeros((8, 16)))


def test_shape_differing_by_unit_dims_is_accepted(add_prog):
    """As DaCe does (NPBench's nbody passes `mass` as (N, 1) for `[N]`): same elements, C-contiguous."""
    x, y = np.random.rand(4, 8, 16), np.random.rand(8, 1, 16)
    np.testing.assert_allclose(add_prog(x=x, y=y), x + y.reshape(8, 16), rtol=1e-12)
    assert y.shape == (8, 1, 16)     # the caller's array is left as it was
    x1 = x.reshape(1, 4, 8, 16, 1)
    np.testing.assert_allclose(add_prog(x=x1, y=y[:, 0, :].copy()), x + y.reshape(8, 16), rtol=1e-12)


def test_shape_differing_by_unit_dims_but_strided_is_refused(add_prog):
    add_prog(x=np.zeros((4, 8, 16)), y=np.zeros((8, 1, 16)))      # a good call of the same shapes first:
    y = np.zeros((8, 2, 16))[:, :1, :]                             # the checked-signature cache must not hide this
    with pytest.raises(InputError, match=r"same but for dimensions of size 1, and it is not C-contiguous"):
        add_prog(x=np.zeros((4, 8, 16)), y=y)
    with pytest.raises(InputError, match=r"shape \(16, 8\) but the program expects \(8, 16\)"):
        add_prog(x=np.zeros((4, 8, 16)), y=np.zeros((16, 8)))


def test_wrong_dtype(add_prog):
    with pytest.raises(InputError, match="dtype float32 but the program expects float64"):
        add_prog(x=np.zeros((4, 8, 16), np.float32), y=np.zeros((8, 16)))


def test_missing_argument(add_prog):
    with pytest.raises(InputError, match="missing argument `y`"):
        add_prog(x=np.zeros((4, 8, 16)))


def test_rank_0_passes_arrays_whole(add_prog):
    with pytest.raises(InputError, match="`x` is None on rank 0"):
        add_prog(x=None, y=np.zeros((8, 16)))


def test_too_few_ranks_for_schedule():
    from distsdfg.testing.programs import get
    sdfg = get("add3d").sdfg()
    distsdfg.lower(sdfg, {distsdfg.maps(sdfg)[0].key: (2, 2, 1)})
    fn = distsdfg.compile(sdfg)
    with pytest.raises(CommunicatorSizeError, match="needs 4 ranks but the communicator has 1"):
        fn(x=np.zeros((4, 8, 16)), y=np.zeros((8, 16)))


def test_lowering_twice_is_refused():
    from distsdfg.testing.programs import get
    sdfg = get("add3d").sdfg()
    distsdfg.lower(sdfg, {})
    with pytest.raises(distsdfg.DistributedLoweringError, match="already lowered"):
        distsdfg.lower(sdfg, {})


class _DeviceArray:
    """Stands in for a CuPy array on machines without a GPU: same module name, `.get()` to the
    host, item assignment from another device array."""
    __module__ = "cupy"

    def __init__(self, a):
        self.a = np.array(a)

    def get(self):
        return self.a.copy()

    def __setitem__(self, key, value):
        self.a[key] = value.a


@pytest.fixture
def fake_cupy(monkeypatch):
    import types
    mod = types.ModuleType("cupy")
    mod.asarray = _DeviceArray
    monkeypatch.setitem(__import__("sys").modules, "cupy", mod)
    return mod


def test_device_arrays_in_device_arrays_out(add_prog, fake_cupy):
    x, y = np.random.rand(4, 8, 16), np.random.rand(8, 16)
    out = add_prog(_DeviceArray(x), _DeviceArray(y))      # positional, in the program's argument order
    assert isinstance(out, _DeviceArray)
    np.testing.assert_allclose(out.a, x + y, rtol=1e-12)


def test_device_array_written_in_place(fake_cupy):
    from distsdfg.testing.programs import get
    sdfg = get("affine").sdfg()
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"*": (1, 1)}, fuzzy=True))
    affine = distsdfg.compile(sdfg)
    A = np.random.rand(16, 16)
    B = _DeviceArray(np.zeros((16, 16)))
    affine(A=_DeviceArray(A), B=B)
    np.testing.assert_allclose(B.a, 2.0 * A + 1.0, rtol=1e-12)
