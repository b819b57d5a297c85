"""target="gpu" called with CuPy arrays: the variant that takes them in device memory.

Without a GPU: (i) unit tier, no compiler: which arrays a call puts on the device
(``variant_arguments``) and what the variant's SDFG does with them (one rank: the MatMul reads the
caller's arrays and writes the caller's result, no step, no staging buffer, no copy; several ranks
with ``cuda_aware_mpi``: the steps use rank 0's device arrays themselves); (ii) the one-rank matmul
variant built with nvcc (skipped without nvcc): cuBLAS on the arguments, no copy at all in the
generated code; (iii) the variant's data flow run on the host (``emulate_on_host``), through
``DistributedProgram``'s dispatch with a host-backed stand-in for CuPy arrays: results against
NumPy, no ``.get()``; and one mpiexec job on 2 ranks of the emulated variants.

On a GPU the CuPy runs are in ``tests/test_gpu.py`` (``test_device_resident_cupy_arguments``).
"""
import glob
import os
import re
import warnings

import numpy as np
import pytest
from dace import dtypes
from dace.sdfg import nodes

import distsdfg
from distsdfg import dace_compat as dc
from distsdfg.lowering.device_args import root_arrays, variant_arguments
from distsdfg.lowering.gpu import emulate_on_host, nvcc_path
from distsdfg.lowering.pipeline import lower_sdfg
from distsdfg.mpi import DistributedMemlet
from distsdfg.testing.programs import get

NVCC = nvcc_path()
GPU = dtypes.StorageType.GPU_Global


def _base(name, grids, tag, aware=False, placement=None):
    warnings.simplefilter("ignore")
    sdfg = get(name).sdfg()
    sdfg.name = f"{sdfg.name}_{tag}"
    return distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, grids, fuzzy=True), target="gpu",
                          cuda_aware_mpi=aware, placement=placement)


def _variant(base, names):
    low = base._distsdfg
    return lower_sdfg(dc.from_json(low.source), low.schedule, target="gpu", comm=low.comm, device_args=names)


def _copies(sdfg):
    """Edges between two access nodes (DaCe copies), by (source, destination) array."""
    return [(e.src.data, e.dst.data) for st in sdfg.states() for e in st.edges()
            if isinstance(e.src, nodes.AccessNode) and isinstance(e.dst, nodes.AccessNode)]


# -- (i) unit tier ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name,grids,aware,placement,devices,want", [
    ("matmul", {"gemm_map": (1, 1, 1)}, False, None, ["A", "B"], ("A", "B", "__return")),
    ("matmul", {"gemm_map": (1, 1, 1)}, False, None, ["B"], ("B", "__return")),       # mixed: A stays on the host
    ("matmul", {"gemm_map": (1, 1, 1)}, False, None, [], ()),                         # NumPy call: no variant
    ("matmul", {"gemm_map": (2, 1, 1)}, False, None, ["A", "B"], ("A", "B", "__return")),  # staged, 2 ranks
    ("matmul", {"gemm_map": (2, 1, 1)}, True, None, ["A"], ("A", "__return")),        # CUDA-aware: any ranks
    ("affine", {"*": (1, 1)}, False, None, ["A", "B"], ("A", "B")),                   # B written in place
    ("flagged", {"*": (1,)}, False, "distributed", ["A"], ()),                        # placement: via host
])
def test_which_arrays_a_call_puts_on_the_device(name, grids, aware, placement, devices, want):
    base = _base(name, grids, "plan", aware, placement)
    assert variant_arguments(base, base._distsdfg, devices) == want


def test_cpu_programs_and_variants_have_no_variant():
    sdfg = get("matmul").sdfg()
    distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, {"gemm_map": (1, 1, 1)}))
    assert variant_arguments(sdfg, sdfg._distsdfg, ["A"]) == ()
    v = _variant(_base("matmul", {"gemm_map": (1, 1, 1)}, "plan2"), ("A", "B", "__return"))
    assert variant_arguments(v, v._distsdfg, ["A"]) == ()       # a variant is not varied again


def test_one_rank_matmul_reads_and_writes_the_callers_device_arrays():
    base = _base("matmul", {"gemm_map": (1, 1, 1)}, "unit")
    v = _variant(base, ("A", "B", "__return"))
    low = v._distsdfg
    assert low.rank0_only and low.device_args == ("A", "B", "__return") and v.name != base.name
    for a in ("A", "B", "__return"):
        assert v.arrays[a].storage == GPU and not v.arrays[a].transient
    assert not [n for st in v.states() for n in st.nodes() if isinstance(n, DistributedMemlet)]
    assert not [a for a, d in v.arrays.items() if d.storage == dtypes.StorageType.CPU_Pinned]
    assert not [a for a, d in v.arrays.items() if d.transient and d.storage == GPU]   # no device buffer of ours
    assert _copies(v) == []
    (st, mm), = [(st, n) for st in v.states() for n in st.nodes() if type(n).__name__ == "MatMul"]
    assert mm.schedule == dtypes.ScheduleType.GPU_Default
    assert sorted(e.src.data for e in st.in_edges(mm)) == ["A", "B"]
    assert [e.dst.data for e in st.out_edges(mm)] == ["__return"]
    # the host lowering of the same program is unchanged: staged steps, pinned buffers
    assert base._distsdfg.device_args == () and not base._distsdfg.rank0_only
    assert all(base.arrays[a].storage == dtypes.StorageType.Default for a in ("A", "B", "__return"))


def test_one_rank_mixed_call_stages_only_the_host_argument():
    v = _variant(_base("matmul", {"gemm_map": (1, 1, 1)}, "mixed"), ("B", "__return"))
    assert v.arrays["A"].storage == dtypes.StorageType.Default and v.arrays["B"].storage == GPU
    steps = [n for st in v.states() for n in st.nodes() if isinstance(n, DistributedMemlet)]
    assert [n.label for n in steps] == ["dm_0_scatter_A"]         # A: from the host array into a device buffer
    (st, mm), = [(st, n) for st in v.states() for n in st.nodes() if type(n).__name__ == "MatMul"]
    assert "B" in [e.src.data for e in st.in_edges(mm)] and [e.dst.data for e in st.out_edges(mm)] == ["__return"]
    assert ("B", "B_host") not in _copies(v) and not any(s == "B" or d == "B" for s, d in _copies(v))


def test_one_rank_in_place_argument_is_written_by_the_kernel():
    v = _variant(_base("affine", {"*": (1, 1)}, "inplace"), ("A", "B"))
    assert v._distsdfg.rank0_only and _copies(v) == []
    entries = [(st, n) for st in v.states() for n in st.nodes() if isinstance(n, nodes.MapEntry)
               and st.entry_node(n) is None]
    (st, entry), = entries
    assert entry.map.schedule == dtypes.ScheduleType.GPU_Device
    assert [e.src.data for e in st.in_edges(entry)] == ["A"]
    assert [e.dst.data for e in st.out_edges(st.exit_node(entry))] == ["B"]


def test_cuda_aware_variant_steps_use_rank_0s_device_arrays():
    v = _variant(_base("matmul", {"gemm_map": (2, 1, 1)}, "aware", aware=True), ("A", "B", "__return"))
    low = v._distsdfg
    assert not low.rank0_only
    steps = [(st, n) for st in v.states() for n in st.nodes() if isinstance(n, DistributedMemlet)]
    assert steps and all(n.buffers == "device" for _, n in steps)
    touched = {e.data.data for st, n in steps for e in st.in_edges(n) + st.out_edges(n) if not e.data.is_empty()}
    assert {"A", "B", "__return"} <= touched
    assert {n.array for _, n in steps if n.global_device} == {"A", "B", "__return"}
    assert not [a for a, d in v.arrays.items() if d.storage == dtypes.StorageType.CPU_Pinned]


def test_staged_variant_steps_use_rank_0s_device_arrays():
    v = _variant(_base("matmul", {"gemm_map": (2, 1, 1)}, "staged2"), ("A", "B", "__return"))
    low = v._distsdfg
    assert not low.rank0_only and low.device_args == ("A", "B", "__return")
    steps = [(st, n) for st in v.states() for n in st.nodes() if isinstance(n, DistributedMemlet)]
    # every step is staged on the device buffers; the scatters and the gather take rank 0's device arrays
    assert steps and all(n.buffers == "staged" for _, n in steps)
    globals_ = {n.array for _, n in steps if n.global_device}
    assert globals_ == {"A", "B", "__return"}, globals_
    assert not [a for a, d in v.arrays.items() if d.storage == dtypes.StorageType.CPU_Pinned]


def test_device_args_must_be_arrays_rank_0_passes():
    sdfg = get("matmul").sdfg()
    from distsdfg.values.schedule import as_schedule
    sched = as_schedule(distsdfg.schedule_by_label(sdfg, {"gemm_map": (1, 1, 1)}))
    with pytest.raises(distsdfg.DistributedLoweringError, match="device_args names `C`"):
        lower_sdfg(sdfg, sched, target="gpu", device_args=("A", "C"))
    assert root_arrays(get("matmul").sdfg()) == {"A", "B", "__return"}


def test_device_stand_in_is_taken_as_a_device_array():
    """Non-root ranks of a CUDA-aware variant pass a host stand-in where rank 0 passes device memory."""
    from dace.codegen.compiled_sdfg import _array_interface_ptr
    from dace.dtypes import is_array
    from distsdfg.runtime.root_args import DeviceStandIn
    host = np.zeros(1)
    s = DeviceStandIn(host)
    assert is_array(s) and _array_interface_ptr(s, GPU) == host.ctypes.data


# -- (ii) the one-rank variant built with nvcc -----------------------------------------------------------
@pytest.mark.skipif(NVCC is None, reason="nvcc not found (set CUDACXX or put nvcc on PATH): GPU builds not tested")
def test_one_rank_variant_builds_with_cublas_on_the_arguments_and_no_copy(tmp_path, monkeypatch):
    from mpi4py import MPI

    from distsdfg.errors import DistributedLoweringError
    from distsdfg.lowering.gpu import gpu_available, has_cublas
    from distsdfg.runtime.program import DistributedProgram, build
    monkeypatch.chdir(tmp_path)
    dc.ensure_mpi_on_path()
    v = _variant(_base("matmul", {"gemm_map": (1, 1, 1)}, "dev_build"), ("A", "B", "__return"))
    compiled, folder = build(v, rebuild=True)
    assert glob.glob(os.path.join(folder, "build", f"lib{v.name}.so"))
    cpp = open(glob.glob(os.path.join(folder, "src", "cpu", "*.cpp"))[0]).read()
    code = "".join(open(p).read() for p in glob.glob(os.path.join(folder, "src", "*", "*.c*")))
    if has_cublas():
        assert "cublasDgemm" in code
    else:       # DaCe's own GPU GEMM, called on the caller's pointers
        assert all(f"&{a}[0]" in cpp for a in ("A", "B", "__return"))
    assert "cudaMemcpy" not in code and "run_step" not in code      # no copy, no communication step
    assert re.findall(r"cudaMalloc\w*\(\(void \*\*\) ?&(\w+)", code) == ["dev_X"]   # DaCe's device probe only
    if not gpu_available():
        prog = DistributedProgram(v, compiled, MPI.COMM_WORLD)
        with pytest.raises(DistributedLoweringError, match="sees no CUDA GPU"):
            prog(A=None, B=None)


# -- (iii) the variant's data flow on the host ----------------------------------------------------------
class _HostBackedDeviceArray:
    """Stands in for a CuPy array without a GPU: module ``cupy``, ``__cuda_array_interface__`` whose
    pointer is host memory (the emulated variant reads it as such), and a counted ``.get()``."""
    __module__ = "cupy"
    gets = 0

    def __init__(self, a):
        self.a = np.ascontiguousarray(a)

    shape = property(lambda self: self.a.shape)
    dtype = property(lambda self: self.a.dtype)
    flags = property(lambda self: self.a.flags)
    size = property(lambda self: self.a.size)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.a.shape, "typestr": self.a.dtype.str, "version": 3, "strides": None,
                "data": (self.a.ctypes.data, False)}

    @property
    def __array_interface__(self):
        return self.a.__array_interface__

    def get(self):
        type(self).gets += 1
        return self.a.copy()

    def __setitem__(self, key, value):
        self.a[key] = value.a


@pytest.fixture
def emulated_dispatch(monkeypatch):
    """``DistributedProgram`` of a GPU lowering whose device variants are emulated on the host."""
    import types
    from distsdfg.lowering import pipeline
    from distsdfg.runtime import program as program_mod
    real = pipeline.lower_sdfg

    def lower_emulated(*args, **kwargs):
        return emulate_on_host(real(*args, **kwargs))
    monkeypatch.setattr(pipeline, "lower_sdfg", lower_emulated)
    monkeypatch.setattr(program_mod, "gpu_available", lambda: True)
    fake = types.ModuleType("cupy")
    fake.asarray = _HostBackedDeviceArray
    monkeypatch.setitem(__import__("sys").modules, "cupy", fake)
    _HostBackedDeviceArray.gets = 0

    def make(name, grids, tag):
        from mpi4py import MPI
        return program_mod.DistributedProgram(_base(name, grids, tag), None, MPI.COMM_WORLD)
    return make


def test_device_arguments_run_the_variant_without_host_copies(emulated_dispatch):
    """Matmul on one rank, CuPy-like arrays in: the variant runs on their memory, twice with new
    sizes (persistent state re-made); a mixed call takes B on the device and A on the host."""
    prog = emulated_dispatch("matmul", {"gemm_map": (1, 1, 1)}, "emu_dispatch")
    rng = np.random.default_rng(3)
    for m, k, n in ((48, 32, 24), (20, 12, 8), (48, 32, 24)):
        A, B = rng.random((m, k)), rng.random((k, n))
        C = prog(A=_HostBackedDeviceArray(A), B=_HostBackedDeviceArray(B))
        assert np.abs(np.asarray(C) - A @ B).max() <= 1e-10 * np.abs(A @ B).max()
    assert list(prog._variants) == [("A", "B", "__return")]
    assert prog._variants[("A", "B", "__return")].lowered.rank0_only
    A, B = rng.random((16, 8)), rng.random((8, 4))
    C = prog(A=A, B=_HostBackedDeviceArray(B))
    assert np.abs(np.asarray(C) - A @ B).max() <= 1e-10 * np.abs(A @ B).max()
    assert sorted(prog._variants) == [("A", "B", "__return"), ("B", "__return")]
    assert _HostBackedDeviceArray.gets == 0


def test_device_argument_written_in_place_by_the_variant(emulated_dispatch):
    prog = emulated_dispatch("affine", {"*": (1, 1)}, "emu_inplace")
    A = np.random.default_rng(4).random((32, 32)).astype(np.float64)
    B = _HostBackedDeviceArray(np.zeros((32, 32)))
    prog(A=_HostBackedDeviceArray(A), B=B)
    assert np.abs(B.a - (2.0 * A + 1.0)).max() <= 1e-10 * np.abs(2.0 * A + 1.0).max()
    assert _HostBackedDeviceArray.gets == 0


# -- one mpiexec job on 2 ranks: the emulated variants (one rank, staged and CUDA-aware on two) -----------
EMULATED = [
    "staged+args|loop|matmul:gemm_map=1,1,1",      # one-rank variant on a 2-rank communicator (rank 0 alone)
    "device+args|loop|matmul:gemm_map=2,1,1",      # steps scatter from and gather into rank 0's device arrays
    "device+args|loop|affine:*=2,1",               # an argument written in place, rows split
    "device+args|loop|matmul:gemm_map=1,2,1",      # column blocks of a device global: packed plane by plane
    "staged+args|loop|matmul:gemm_map=2,1,1",      # staged: rank 0's block device to device, the other's packed
    "staged+args|loop|matmul:gemm_map=1,2,1",      # staged, column blocks
    "staged+args|loop|acc_sum:*=1,2,1",            # an accumulation into a device global (combined on the host)
]


@pytest.fixture(scope="module")
def emulated_job(tmp_path_factory):
    from distsdfg.testing.mpirun import launch_cases
    folder = tmp_path_factory.mktemp("device_args")
    results = launch_cases(2, EMULATED, folder, module="distsdfg.testing.gpu_emulated")
    return results, [open(p).read() for p in glob.glob(str(folder / ".dacecache" / "*" / "src" / "cpu" / "*.cpp"))]


@pytest.mark.parametrize("case", EMULATED)
def test_emulated_variant_on_two_ranks(emulated_job, case):
    from distsdfg.testing.mpirun import bytes_mismatch
    r = emulated_job[0][case]
    assert "error" not in r, r.get("trace", r.get("error"))
    assert r["shape_ok"] and r["rel_err"] <= 1e-10, r
    assert bytes_mismatch(r) is None, bytes_mismatch(r)
    if case.endswith("=1,1,1"):
        assert all(sum(s["sent"]) == 0 for s in r["report"])      # one rank: nothing moves


def test_emulated_variants_run_the_device_global_code_paths(emulated_job):
    """The variants' steps on rank 0's device arrays run the runtime's device-global code (``GD``) of
    both device policies, over host memory."""
    texts = emulated_job[1]
    assert any("distsdfg::EmulatedStagedMem, true>" in t for t in texts)
    assert any("distsdfg::EmulatedDeviceMem, true>" in t for t in texts)


def test_warm_calls_pass_device_pointers_on_the_fast_path():
    """``dace_compat.call_compiled`` after the first call: a GPU_Global argument takes the pointer of
    ``__cuda_array_interface__``; a host array where device memory is expected goes through DaCe."""
    import ctypes

    from dace import data as dt
    from dace import float64, int32
    from distsdfg.dace_compat.build import _argument_record, call_compiled

    class Compiled:
        _initialized = True
        _sig = ("A", "x", "n")
        _typedict = {"A": dt.Array(float64, [4], storage=GPU), "x": dt.Array(float64, [4]), "n": dt.Scalar(int32)}
        _lastargs = ((0, 0, 0), ())
        _retarray_shapes, _return_arrays = (), ()
        through_dace = 0

        def _initialize_return_values(self, call):
            pass

        def fast_call(self, args, init, do_gpu_check=False):
            return args

        def __call__(self, **call):
            Compiled.through_dace += 1

    c = Compiled()
    c._distsdfg_args = _argument_record(c)
    assert c._distsdfg_args[1][:2] == ("device", None)
    dev, host = _HostBackedDeviceArray(np.zeros(4)), np.zeros(4)
    args = call_compiled(c, {"A": dev, "x": host, "n": 3})
    assert [a.value for a in args[:2]] == [dev.a.ctypes.data, host.ctypes.data] and args[2].value == 3
    assert isinstance(args[2], ctypes.c_int) and Compiled.through_dace == 0
    call_compiled(c, {"A": np.zeros(4), "x": host, "n": 3})
    assert Compiled.through_dace == 1
