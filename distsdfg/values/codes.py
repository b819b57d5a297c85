"""The integer codes of the step tables, shared with the C++ runtime: declared here, once.

A step table (``distsdfg.mpi.encode``) is int64 values that the generated code of a rank hands to
``distsdfg_runtime.h``; its kind, element type, reduction operator, redistribution collective and
flags are the codes below. The runtime's C++ enums are generated from these classes into
``distsdfg/mpi/include/distsdfg_codes.h`` (``python -m distsdfg.mpi.codes_header`` writes it; a unit
test fails while the file differs from what this module declares). Each class becomes one C++
enum of the same name whose members carry its prefix in ``CODE_ENUMS``: ``Mode.ALLREDUCE`` is
``M_ALLREDUCE = 1``.
"""
import enum

__all__ = ["Kind", "Mode", "Op", "Flag", "Dtype", "CODE_ENUMS"]


class Kind(enum.IntEnum):
    """What a step does: ``StepSpec.kind`` (``distsdfg.values.modes.StepKind``, by member name)."""
    SCATTER = 1      # rank 0's array -> the ranks' blocks
    GATHER = 2       # the ranks' blocks -> rank 0's array
    REDUCE = 3       # the ranks' partial blocks, combined -> rank 0's array
    FILL = 4         # the reduction's identity -> the ranks' blocks
    REDIST = 5       # one distributed copy -> another (a table of its own layout)


class Mode(enum.IntEnum):
    """A redistribution's collective: ``CommPlan.collective`` (``distsdfg.values.modes.Collective``)."""
    LOCAL = 0
    ALLREDUCE = 1
    REDUCE_SCATTER = 2
    ALLGATHERV = 3
    ALLTOALLW = 4
    ALLTOALLV = 5
    REDUCE = 6
    P2P = 7          # Isend/Irecv


class Op(enum.IntEnum):
    """A step's reduction operator (``NONE``: the step combines nothing)."""
    NONE = 0
    SUM = 1
    PROD = 2
    MAX = 3
    MIN = 4


class Flag(enum.IntFlag):
    """``ConcreteStep.flags``: bits that refine what a step does."""
    ACC = 1          # accumulate into the destination (a fill skips its first holder)
    MERGE = 2        # merge overlapping gathered blocks
    REPL = 4         # replicate over a sub-grid
    MASK = 8         # mask overlapping partial blocks
    PAD = 16         # fill only what lies outside the block (padding; the next step writes the block)


class Dtype(enum.IntEnum):
    """The element type, by NumPy dtype name (``Dtype.of("float64")``)."""
    FLOAT32 = 0
    FLOAT64 = 1
    INT32 = 2
    INT64 = 3
    UINT32 = 4
    UINT64 = 5
    INT8 = 6
    UINT8 = 7
    INT16 = 8
    UINT16 = 9
    COMPLEX64 = 10
    COMPLEX128 = 11
    BOOL = 12

    @classmethod
    def of(cls, name: str) -> "Dtype":
        """The code of the NumPy dtype ``name``; a ValueError lists the types a step can move."""
        try:
            return cls[str(name).upper()]
        except KeyError:
            raise ValueError(f"no step can move elements of type {name!r}; the types are "
                             f"{', '.join(m.name.lower() for m in cls)}") from None


#: The classes the C++ header declares, in its order, each with the prefix of its members' C++ names
#: (the runtime's enums share one namespace: ``REDUCE`` is a kind, ``M_REDUCE`` a collective).
CODE_ENUMS = {Kind: "", Mode: "M_", Op: "OP_", Flag: "F_", Dtype: "DT_"}
