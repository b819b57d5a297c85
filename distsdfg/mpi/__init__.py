"""MPI library nodes and the C++ runtime they call."""
from .environment import DistSDFGRuntime
from .distributed_memlet import DistributedMemlet

__all__ = ["DistSDFGRuntime", "DistributedMemlet"]
