"""distsdfg: automatic SPMD distribution of DaCe programs over MPI."""
from .errors import *  # noqa: F401,F403
from .lowering import blas as _blas
from .dace_compat.slices import keep_slice_dimensions as _keep_slice_dimensions
from .dace_compat.npfuncs import numpy_functions as _numpy_functions
from .dace_compat.nparrays import numpy_array_functions as _numpy_array_functions
from .dace_compat.pyops import python_division as _python_division, sum_of_booleans_counts as _sum_of_booleans_counts
from .dace_compat.tasklet_index import index_by_connector_dims as _index_by_connector_dims
from .dace_compat.build import keep_special_values as _keep_special_values
from .dace_compat.ordered import ordered_array_elimination as _ordered_array_elimination
from .lowering.blas import NoBlasWarning
from .values.schedule import Schedule
from .analysis.kernels import MapInfo
from .values.plan import CommStep
from .solver.redistribute import CommPlan
from .api import maps, lower, compile, comm_report, comm_plans, schedule_by_label, auto_schedule, schedule_cost, explain
from .planner.costmodel import PaperModel, BytesModel, AlphaBetaModel
from .planner.timemodel import TimeModel
from .planner.calibration import calibrate
from .lowering.placement import ArrayLayout, layout
from .planner.sharding import schedule_from_shardings
from .frontend.torch_frontend import TorchProgram, from_torch
from .frontend.torch_training import from_torch_train_step

__all__ = ["Schedule", "MapInfo", "CommStep", "CommPlan", "maps", "lower", "compile", "comm_report", "comm_plans",
           "schedule_by_label", "auto_schedule", "schedule_cost", "explain", "PaperModel", "BytesModel",
           "AlphaBetaModel", "TimeModel", "calibrate", "ScheduleError", "DistributedLoweringError", "ArrayLayout", "layout",
           "schedule_from_shardings", "TorchProgram", "from_torch", "from_torch_train_step", "NoBlasWarning"]
__version__ = "0.1.0"

_blas.configure()     # DaCe's BLAS nodes use OpenBLAS or MKL in every process that imports distsdfg
_keep_slice_dimensions()   # A[:, 0:1] keeps its dimension in the programs parsed after this (NumPy's shape)
_numpy_functions()         # np.clip, np.var, np.std, np.linalg.norm, np.prod, ... are maps and reductions, not callbacks
_numpy_array_functions()   # and np.matmul, np.outer, np.diag, np.trace, np.tril, np.cumsum, np.diff, argmax, ...
_python_division()         # a // b and a % b in tasklets with Python's (NumPy's) signs, not C's
_sum_of_booleans_counts()  # np.sum of a bool array (also a.sum(axis=...)) counts (int64), as in NumPy
_index_by_connector_dims()  # a tasklet's _w[p, q] on a plane of a (N, 1, H, W) array keeps both indices
_keep_special_values()     # np.isnan / isinf tests survive -ffast-math in programs DaCe itself compiles too
_ordered_array_elimination()  # simplify() rewrites a program the same way whatever PYTHONHASHSEED
