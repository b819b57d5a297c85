"""The DistributedLoweringError family: every refusal names what to change."""

__all__ = [
    "DistributedLoweringError",
    "ScheduleError",
    "UnknownMapError",
    "GridShapeError",
    "UnsupportedProgramError",
    "AccumulationError",
    "CommunicatorSizeError",
    "InputError",
    "PlacementError",
    "SymbolicSizeError",
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


class CommunicatorSizeError(DistributedLoweringError):
    """The program is run on a communicator whose size does not fit the schedule."""


class InputError(DistributedLoweringError):
    """The arguments given to a compiled distributed program are wrong."""


class PlacementError(DistributedLoweringError):
    """A placement names an array that cannot live distributed at the program's boundary."""


class SymbolicSizeError(DistributedLoweringError):
    """Planning or a report needs a concrete value for a size symbol that was not given."""

    def __init__(self, message: str, symbol: str = "", what: str = ""):
        super().__init__(message)
        self.symbol = symbol      # the first size symbol without a value
        self.what = what          # what depends on it (a map, an array)
