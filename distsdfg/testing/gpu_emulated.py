"""The GPU lowering of programs with loops and distributed placement, run on the host.

    mpiexec -n 4 python -m mpi4py -m distsdfg.testing.gpu_emulated [--on-gpu] OUT.json 'staged|loop|jacobi1d:*=4' ...

A case is ``MODE|SUITE|CASE``. Every case is lowered with ``target="gpu"`` (``MODE`` ``staged``:
communication through pinned host copies; ``device``: ``cuda_aware_mpi=True``; either with ``+args``:
the variant a call with CuPy arrays runs, every argument and result in device memory,
``distsdfg.lowering.device_args``) and then made to run
on the host by :func:`distsdfg.lowering.gpu.emulate_on_host`: the same buffers, staging copies and steps, with
device memory replaced by host memory (steps on device buffers run the runtime's device code path,
``EmulatedDeviceMem``). ``SUITE`` ``loop`` runs ``CASE`` like ``distsdfg.testing.mpirun`` (inputs on
rank 0, checked against NumPy there); ``placement`` like ``distsdfg.testing.placement_run`` (every
rank passes and receives its own blocks, each checked against NumPy). ``--on-gpu`` runs the same
cases on a GPU as lowered, without the emulation.
"""
from __future__ import annotations

import contextlib
import sys
import warnings


#: Placement cases for 2 ranks, next to ``placement_run.CASES`` (case -> program, schedule, placement, calls).
PLACEMENT = {
    "jacobi2d:2,1 x2": ("jacobi2d", {"*": (2, 1)}, "distributed", 2),
    "flagged:2": ("flagged", {"*": (2,)}, "distributed", 1),
}


def _gpu_lower(mode: str, emulate: bool = True):
    """A lowering with target="gpu" in ``mode``, then (``emulate``) made to run on the host. A mode
    ending in ``+args`` lowers the variant that takes every argument and result in device memory
    (``distsdfg.lowering.device_args``: what a call with CuPy arrays runs), root placement only."""
    from ..lowering.device_args import root_arrays
    from ..lowering.gpu import emulate_on_host
    from ..lowering.pipeline import lower_sdfg
    from ..values.schedule import as_schedule
    comm, _, args = mode.partition("+")

    def lower(sdfg, sched, placement=None):
        names = tuple(sorted(root_arrays(sdfg))) if args else ()
        lower_sdfg(sdfg, as_schedule(sched), target="gpu", comm="device" if comm == "device" else "host", placement=placement,
                   device_args=names)
        return emulate_on_host(sdfg) if emulate else sdfg
    return lower


@contextlib.contextmanager
def _lowering(mode: str, emulate: bool = True):
    """Let mpirun and placement_run lower their cases for the GPU, emulated."""
    from ..values.schedule import as_schedule
    from distsdfg.testing import mpirun, placement_run
    lower = _gpu_lower(mode, emulate)

    def loop_lower(sdfg, sched, target, buffers):
        lower(sdfg, as_schedule(sched))

    def placement_lower(name, sched, placement, sizes, P, tag):
        sdfg, schedule = placement_run.scheduled(name, sched, sizes, P, f"gpu{'emu' if emulate else ''}_{mode}_{tag}")
        return lower(sdfg, schedule, placement)

    saved = mpirun._lower, placement_run._lower, dict(placement_run.CASES)
    mpirun._lower, placement_run._lower = loop_lower, placement_lower
    placement_run.CASES.update(PLACEMENT)
    try:
        yield
    finally:
        mpirun._lower, placement_run._lower = saved[:2]
        placement_run.CASES.clear()
        placement_run.CASES.update(saved[2])


def run(case: str, comm, tag: int = 0, emulate: bool = True) -> dict:
    from distsdfg.testing import mpirun, placement_run
    mode, suite, text = case.split("|", 2)
    if mode not in ("staged", "device", "staged+args", "device+args") or suite not in ("loop", "placement") \
            or (mode.endswith("+args") and suite != "loop"):
        raise ValueError(f"case {case!r}: expected staged|device (+args: arguments in device memory, loop suite "
                         f"only), then loop|placement")
    with _lowering(mode, emulate):
        rec = mpirun.run_case(text, comm) if suite == "loop" else placement_run.run_case(text, comm, tag)
    if comm.rank == 0:
        rec["case"] = case
    return rec


def main(argv):
    from distsdfg.testing.mpirun import run_cases
    warnings.simplefilter("ignore")
    emulate = argv[:1] != ["--on-gpu"]
    argv = argv if emulate else argv[1:]
    counter = iter(range(len(argv)))
    run_cases(argv[0], argv[1:], lambda c, comm: run(c, comm, next(counter), emulate))


if __name__ == "__main__":
    main(sys.argv[1:])
