"""The DistributedLoweringError family: every refusal names what to change."""

__all__ = [
    "DistributedLoweringError",
    "ScheduleError",
    "UnknownMapError",
    "GridShapeError",
    "UnsupportedProgramError",
    "AccumulationError",
    "IndirectWriteError",
    "CommunicatorSizeError",
    "InputError",
    "ScalarMismatchError",
    "PlacementError",
    "SizeError",
    "LoopDependentMapError",
    "NotAnSDFGError",
    "CommandLineError",
    "OptionError",
    "LoweredStateError",
    "TorchFrontendError",
    "SymbolicSizeError",
    "RewriteLimitError",
    "FrontendInvalidError",
    "ProgramParseError",
    "PlanMismatchError",
    "CheckpointError",
    "CheckpointMismatchError",
]


class DistributedLoweringError(ValueError):
    """Base class: lowering, compiling or calling a distributed program was refused."""


class ScheduleError(DistributedLoweringError):
    """The schedule does not fit the SDFG (keys, grid lengths, grid sizes, consistency)."""


class UnknownMapError(ScheduleError):
    """A schedule names a map key that the SDFG does not have."""


class GridShapeError(ScheduleError):
    """A grid has the wrong number of dimensions or a non-positive dimension."""


class UnsupportedProgramError(DistributedLoweringError):
    """The program contains something no solver can lower correctly."""


class AccumulationError(UnsupportedProgramError):
    """A map writes an element from iterations on several ranks without a reduction that combines them."""


class IndirectWriteError(AccumulationError):
    """A map overwrites elements at indices it reads from data (``y[perm[i]] = v``) and the schedule
    splits the parameter those indices come from: no rank knows which elements the others wrote."""


class CommunicatorSizeError(DistributedLoweringError):
    """The program is run on a communicator whose size does not fit the schedule."""


class InputError(DistributedLoweringError):
    """The arguments given to a compiled distributed program (or to ``compile``) are wrong."""


class ScalarMismatchError(InputError):
    """Ranks passed a scalar argument of one call with different values."""


class PlacementError(DistributedLoweringError):
    """A placement names an array that cannot live distributed at the program's boundary."""


class SizeError(DistributedLoweringError):
    """A size symbol (or a rank count) is missing, not an integer, or not positive."""


class LoopDependentMapError(UnsupportedProgramError):
    """A map's iteration range or accesses depend on a symbol the program sets while it runs (a loop
    variable): its blocks cannot be planned before the call, so it can only run whole on rank 0."""


class NotAnSDFGError(DistributedLoweringError):
    """A function that takes an SDFG (or a compiled program) was given something else."""


class CommandLineError(DistributedLoweringError):
    """The ``distsdfg`` command was given a file, function, schedule or size it cannot use."""


class OptionError(DistributedLoweringError):
    """An option (target, cuda_aware_mpi, cost model, searcher, ...) has a value it does not take."""


class LoweredStateError(DistributedLoweringError):
    """An SDFG is used before ``lower`` (compile, comm_report, layout) or lowered a second time."""


class TorchFrontendError(DistributedLoweringError):
    """A module, optimizer or input the PyTorch frontend cannot translate as given."""


class SymbolicSizeError(SizeError):
    """Planning or a report needs a concrete value for a size symbol that was not given."""

    def __init__(self, message: str, symbol: str = "", what: str = ""):
        super().__init__(message)
        self.symbol = symbol      # the first size symbol without a value
        self.what = what          # what depends on it (a map, an array)


class RewriteLimitError(UnsupportedProgramError):
    """distsdfg's rewrite of this program (for the schedule it was given) is an SDFG that DaCe rejects:
    a limit of distsdfg, not a fault of the program; the message names the state and node."""


class FrontendInvalidError(RewriteLimitError):
    """DaCe's own frontend produced an invalid SDFG for the program (DaCe's validation rejects it
    before distsdfg changed anything): the message quotes DaCe's; rewrite the statement it names."""


class ProgramParseError(UnsupportedProgramError):
    """DaCe's frontend cannot parse the ``@dace.program`` (the message quotes the file, the line and its
    source, and what to write instead)."""


class PlanMismatchError(DistributedLoweringError):
    """The ranks lowered a program differently (another program, schedule or order of rewrites): every
    rank raises it at ``compile``, naming the first difference, instead of running a plan the binary
    rank 0 built does not have."""


class CheckpointError(DistributedLoweringError):
    """A checkpoint directory cannot be written or read: no index (not a checkpoint, or one whose saving did
    not finish), a block file missing or not what the index says, an array that is not this rank's block."""


class CheckpointMismatchError(CheckpointError):
    """A checkpoint's tensors do not fit the program it is loaded into: the message names every tensor that
    is missing on either side or whose shape or dtype differs, with both shapes."""
