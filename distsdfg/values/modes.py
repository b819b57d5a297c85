"""The named modes of a plan and of the public API: str-valued enums, one per vocabulary.

A mode is a ``str`` as well as an enum member: ``StepKind.SCATTER == "scatter"``, it prints, formats,
shows (``repr``) and serialises (JSON, DaCe properties) as its value, and hashes as its string, so
records and options that hold the plain strings keep working. ``ModeEnum.parse`` turns what a user
or a record passes (a member or its value) into the member, and names the valid values on a bad one::

    >>> Placement.parse("distributed") is Placement.DISTRIBUTED
    True
    >>> Target.parse("tpu", what="target")
    Traceback (most recent call last):
    OptionError: target 'tpu' is not supported; use 'cpu' or 'gpu'

The integer codes some modes travel as in a step table are ``distsdfg.values.codes`` (by member
name: ``StepKind.SCATTER.code == codes.Kind.SCATTER``).
"""
import enum
from typing import Optional, Type, TypeVar

from ..errors import DistributedLoweringError, OptionError
from . import codes

__all__ = ["ModeEnum", "StepKind", "Collective", "Placement", "Target", "Buffers", "KernelKind"]

M = TypeVar("M", bound="ModeEnum")


class ModeEnum(str, enum.Enum):
    """A str-valued enum whose members stand for their values wherever a string is expected: ``str``,
    ``format`` and ``repr`` are the value's, so the records that hold a mode print as before."""
    __str__ = str.__str__
    __format__ = str.__format__
    __repr__ = str.__repr__

    @classmethod
    def values(cls) -> tuple:
        return tuple(m.value for m in cls)

    @classmethod
    def parse(cls: Type[M], value, *, what: Optional[str] = None,
              error: Type[DistributedLoweringError] = OptionError) -> M:
        """The member whose value is ``value`` (or ``value`` itself); ``error`` names the valid values."""
        try:
            return cls(value)
        except ValueError:
            *most, last = [repr(v) for v in cls.values()]
            valid = f"{', '.join(most)} or {last}" if most else last
            raise error(f"{what or cls.__name__} {value!r} is not supported; use {valid}") from None


class StepKind(ModeEnum):
    """What a communication step does (``StepSpec.kind``)."""
    SCATTER = "scatter"      # rank 0's array -> the ranks' blocks
    GATHER = "gather"        # the ranks' blocks -> rank 0's array
    REDUCE = "reduce"        # the ranks' partial blocks, combined by the step's operator -> rank 0's array
    FILL = "fill"            # the operator's identity -> the ranks' blocks
    REDIST = "redist"        # one distributed copy -> another (``CommPlan``)

    @property
    def code(self) -> codes.Kind:
        return codes.Kind[self.name]


class Collective(ModeEnum):
    """An MPI call of a plan: a redistribution's collective (``CommPlan.collective``, with a code in
    the step table) or a call of a step to or from rank 0 (``CommStep.collective``)."""
    LOCAL = "local"                  # no MPI call: a local copy
    SCATTERV = "Scatterv"
    GATHERV = "Gatherv"
    BCAST = "Bcast"
    REDUCE = "Reduce"
    ALLREDUCE = "Allreduce"
    REDUCE_SCATTER = "Reduce_scatter"
    ALLGATHERV = "Allgatherv"
    ALLTOALLW = "Alltoallw"
    ALLTOALLV = "Alltoallv"
    P2P = "Isend/Irecv"

    @property
    def code(self) -> codes.Mode:
        """The redistribution collective's code (a KeyError for a call no redistribution makes)."""
        return codes.Mode[self.name]


class Placement(ModeEnum):
    """Where a program's argument arrays live at its boundary (``distsdfg.lower(placement=...)``)."""
    ROOT = "root"                    # rank 0 passes and receives them whole
    DISTRIBUTED = "distributed"      # every rank passes and receives its own block


class Target(ModeEnum):
    """What a lowered program runs on (``distsdfg.lower(target=...)``)."""
    CPU = "cpu"
    GPU = "gpu"


class Buffers(ModeEnum):
    """Where a step's local buffers live, which picks the runtime's memory policy for them
    (``DistributedMemlet.buffers``; ``Lowered.comm``, of every step of a program)."""
    HOST = "host"                        # host memory
    STAGED = "staged"                    # a GPU's, MPI on pinned host temporaries (only the moved boxes copied)
    DEVICE = "device"                    # a GPU's, handed to a CUDA-aware MPI
    EMULATED = "emulated"                # the device code path over host memory (tests without a GPU)
    EMULATED_STAGED = "emulated-staged"  # the staged code path over host memory


class KernelKind(ModeEnum):
    """What a kernel of a program is (``analysis.kernels.Kernel.kind``, the planner's ``Vertex.kind``)."""
    MAP = "map"                          # a map the schedule splits
    LIBRARY = "library"                  # a library node (MatMul, Reduce, ...) split through its pure expansion's maps
    OPAQUE = "opaque"                    # a library node not analysed: it runs on rank 0 as it is
