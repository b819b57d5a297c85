"""target="gpu" with the caller's arrays in device memory: the variant a call with CuPy arrays runs.

A program lowered with ``target="gpu"`` takes host (NumPy) arrays on rank 0. Called with CuPy
arrays there, ``DistributedProgram`` lowers the same program and schedule once more, with
``device_args`` naming the arrays it takes in device memory (the CuPy arguments and every
result), compiles that variant once (cached with the program, rebuilt only when the generated
code changes, like every build) and passes it the device pointers: DaCe 1.0.2 takes any object
with ``__cuda_array_interface__`` for a ``GPU_Global`` argument and returns CuPy arrays for
``GPU_Global`` results. What the variant does with those arrays (:func:`take_on_device`):

- one rank (every kernel's grid all ones; straight-line program, root placement): a step that
  would copy a whole device argument into a kernel's buffer, or a kernel's whole result into a
  device result, is removed and the kernel reads and writes the caller's buffer
  (``optimize.alias_whole_blocks`` restricted to the device arrays): a matrix product is one
  cuBLAS call on the caller's arrays, with nothing copied. The program runs on rank 0 alone;
- any number of ranks: the steps read and write rank 0's device arrays themselves (their
  ``global_device``: the runtime copies boxes of them with ``cudaMemcpy2D`` and never reads them
  on the host). Staged (the default), rank 0's own block moves device to device and the other
  ranks' blocks once between device and pinned host memory, where MPI takes them; with
  ``cuda_aware_mpi=True`` MPI is handed the device arrays, and nothing goes through the host.

With distributed placement there is no variant (:func:`variant_arguments` returns ``()``): each
rank copies its CuPy blocks to the host once (``.get()``) and the results back once.
"""
from __future__ import annotations

from typing import FrozenSet, Iterable, Tuple

from dace import data as dt
from dace import dtypes
from dace.sdfg import SDFG, nodes
from dace.transformation import pass_pipeline as ppl

from ..errors import OptionError

__all__ = ["ArgumentsOnDevice", "root_arrays", "variant_arguments", "take_on_device", "device_storage"]


def root_arrays(sdfg: SDFG, low=None) -> FrozenSet[str]:
    """The arrays rank 0 passes whole and gets back (arguments and ``__return`` results), by name:
    those a variant may take in device memory. ``low``: the lowering of ``sdfg`` (None: ``sdfg`` is
    not lowered yet, and all its argument arrays are meant)."""
    from .rewriter import PLAN_ARRAY
    placed = low.boundary if low is not None else ()
    return frozenset(n for n, d in sdfg.arrays.items()
                     if type(d) is dt.Array and not d.transient and n != PLAN_ARRAY and n not in placed)


def variant_arguments(sdfg: SDFG, low, devices: Iterable[str]) -> Tuple[str, ...]:
    """The arrays the device variant of the lowered ``sdfg`` takes in device memory for a call whose
    arguments ``devices`` are CuPy arrays: those and every result, sorted; ``()`` when the call
    goes through the host (no device argument, a CPU program, or distributed placement)."""
    if low.target != "gpu" or low.device_args or low.boundary:
        return ()
    roots = root_arrays(sdfg, low)
    picked = roots & frozenset(devices)
    if not picked:
        return ()
    return tuple(sorted(picked | {n for n in roots if n.startswith("__return")}))


def device_storage(sdfg: SDFG, names: Iterable[str]) -> int:
    """``GPU_Global`` storage for the arrays ``names`` and the views of them; returns how many."""
    names = set(names)
    views = set()
    for state in sdfg.all_states():
        for n in state.data_nodes():
            if isinstance(sdfg.arrays[n.data], dt.View):
                for e in state.all_edges(n):
                    other = e.dst if e.src is n else e.src
                    if isinstance(other, nodes.AccessNode) and other.data in names:
                        views.add(n.data)
    for name in names | views:
        sdfg.arrays[name].storage = dtypes.StorageType.GPU_Global
    return len(names | views)


def take_on_device(sdfg: SDFG, low, names: Iterable[str], *, straight: bool, optimize: bool) -> int:
    """Before ``OffloadKernels``: record ``names`` as the variant's device arrays and, on one rank,
    let the kernels use them in place of their whole local copies (``alias_whole_blocks`` on those
    arrays only); returns how many steps went."""
    names = tuple(sorted(names))
    roots = root_arrays(sdfg, low)
    wrong = [n for n in names if n not in roots]
    if wrong:
        raise OptionError(f"device_args names `{wrong[0]}`, which is not an array rank 0 passes whole to "
                          f"`{low.original_name}` (those are: {', '.join(sorted(roots)) or 'none'})")
    if low.target != "gpu":
        raise OptionError("device_args puts arguments in GPU memory: it needs target='gpu'")
    low.device_args = names
    if not (optimize and straight and not low.homes and not low.boundary and low.nprocs == 1):
        return 0
    from .optimize import alias_whole_blocks
    removed = alias_whole_blocks(sdfg, low, only=frozenset(names))
    low.rank0_only = True
    return removed


class ArgumentsOnDevice(ppl.Pass):
    """The lowering's pass for a device-argument variant (before ``OffloadKernels``, which gives the
    arrays their ``GPU_Global`` storage): records ``names`` on the lowering and, on one rank, lets
    the kernels use the caller's arrays in place of whole local copies (:func:`take_on_device`).

    Example: the 1-rank matmul ``C = A @ B`` with ``names=("A", "B", "__return")`` loses its three
    steps (scatter ``A``, scatter ``B``, the one-rank reduce of the product) and its three local
    buffers; its MatMul reads ``A`` and ``B`` and writes ``__return``."""

    CATEGORY = "distsdfg"

    def __init__(self, names: Iterable[str], *, straight: bool, optimize: bool = True):
        super().__init__()
        self.names = tuple(sorted(names))
        self.straight = straight
        self.optimize = optimize

    def modifies(self) -> ppl.Modifies:
        return ppl.Modifies.Everything

    def should_reapply(self, modified: ppl.Modifies) -> bool:
        return False

    def apply_pass(self, sdfg: SDFG, _) -> int:
        return take_on_device(sdfg, sdfg._distsdfg, self.names, straight=self.straight, optimize=self.optimize)
