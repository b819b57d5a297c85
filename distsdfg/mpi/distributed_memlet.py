"""DistributedMemlet: a library node that moves one array between root and the ranks' blocks."""
import re

import dace
import dace.library
import dace.properties
from dace import dtypes
from dace.transformation.transformation import ExpandTransformation

from ..dace_compat.trace import TRACE, is_marked
from ..values.modes import Buffers, StepKind
from .environment import DistSDFGRuntime, DistSDFGRuntimeCUDA

__all__ = ["DistributedMemlet", "BUFFERS", "step_node_name", "step_of_name"]

#: The runtime's memory policy (distsdfg_runtime.h, distsdfg_runtime_cuda.h) for each place a step's
#: local buffers may live (``Buffers``).
BUFFERS = {Buffers.HOST: "HostMem", Buffers.STAGED: "StagedDeviceMem", Buffers.DEVICE: "DeviceMem",
           Buffers.EMULATED: "EmulatedDeviceMem", Buffers.EMULATED_STAGED: "EmulatedStagedMem"}


def step_node_name(index: int, kind: str, array: str) -> str:
    """The name of step ``index``'s node (and of the tasklet it expands to): ``dm_3_scatter_T``."""
    return f"dm_{index}_{kind}_{array.strip('_')}"


def step_of_name(name: str):
    """The step index in a name that ``step_node_name`` made, else None."""
    found = re.match(r"dm_(\d+)_", name)
    return int(found.group(1)) if found else None


@dace.library.expansion
class ExpandDistributedMemletMPI(ExpandTransformation):
    """Expands to one call of ``distsdfg::run_step`` on the step's table in the plan array, over the
    communicator whose Fortran handle arrives on ``_comm``."""

    environments = [DistSDFGRuntime]

    @staticmethod
    def expansion(node, parent_state, parent_sdfg, **kwargs):
        out_edge = next(e for e in parent_state.out_edges(node) if e.src_conn == "_out")
        desc = parent_sdfg.arrays[out_edge.data.data]
        ctype = desc.dtype.ctype
        src = "_in" if "_in" in node.in_connectors else "nullptr"
        ins = {"_plan": dace.pointer(dace.int64), "_comm": dace.int32}
        if "_in" in node.in_connectors:
            in_edge = next(e for e in parent_state.in_edges(node) if e.dst_conn == "_in")
            if isinstance(parent_sdfg.arrays[in_edge.data.data], dace.data.Scalar):
                ins["_in"] = desc.dtype       # a scalar arrives by value
                src = "&_in"
            else:
                ins["_in"] = dace.pointer(desc.dtype)
        policy = f"distsdfg::{BUFFERS[node.buffers]}" + (", true" if node.global_device else "")
        code = f"distsdfg::run_step<{ctype}, {policy}>(_plan, {node.step}, {src}, _out, MPI_Comm_f2c(_comm));"
        tasklet = dace.sdfg.nodes.Tasklet(node.name, ins, {"_out": dace.pointer(desc.dtype)}, code,
                                          language=dtypes.Language.CPP, side_effects=True)
        if is_marked(node):      # a traced step records its events (dace_compat.trace)
            tasklet.instrument = TRACE
        return tasklet


@dace.library.expansion
class ExpandDistributedMemletCUDA(ExpandDistributedMemletMPI):
    """The same with the runtime's CUDA memory policies (``buffers="device"`` or ``"staged"``)."""

    environments = [DistSDFGRuntimeCUDA]


@dace.library.node
class DistributedMemlet(dace.sdfg.nodes.LibraryNode):
    """Moves ``array`` as step ``step`` of the solved communication plan.

    Inputs ``_in`` (the source buffer; absent for a fill), ``_plan`` (the plan table) and ``_comm``
    (the communicator's Fortran handle, an int32 scalar), output ``_out`` (the destination buffer).
    ``kind`` is scatter, gather, reduce or fill; the step's blocks per rank live in the plan table,
    computed by distsdfg.values.plan.
    ``buffers="staged"`` or ``"device"``: the local buffers are a GPU's, with MPI on host
    temporaries or handed the GPU buffers (CUDA-aware MPI); set by
    ``distsdfg.lowering.gpu.DeviceBufferComm``. ``global_device``: the global array (``_in`` of a
    scatter, ``_out`` of a gather or reduce) is the caller's device array; set by ``OffloadKernels``.
    """

    implementations = {"MPI": ExpandDistributedMemletMPI, "MPI_CUDA": ExpandDistributedMemletCUDA}
    default_implementation = "MPI"

    step = dace.properties.Property(dtype=int, default=0, desc="Index of the step in the plan table")
    kind = dace.properties.Property(dtype=str, default=StepKind.SCATTER.value,
                                    desc="scatter | gather | reduce | fill | redist (StepKind)")
    array = dace.properties.Property(dtype=str, default="", desc="Global array moved")
    buffers = dace.properties.Property(dtype=str, default=Buffers.HOST.value,
                                       desc="Where the local buffers live: host | staged | device | emulated | emulated-staged "
                                            "(see BUFFERS)")
    global_device = dace.properties.Property(dtype=bool, default=False,
                                             desc="Rank 0's global array is in device memory (a device-argument variant)")

    def __init__(self, name, step=0, kind=StepKind.SCATTER.value, array="", has_input=True, *args, **kwargs):
        inputs = {"_plan", "_comm", "_in"} if has_input else {"_plan", "_comm"}
        super().__init__(name, *args, inputs=inputs, outputs={"_out"}, **kwargs)
        self.step = step
        self.kind = kind
        self.array = array
