"""distsdfg: automatic SPMD distribution of DaCe programs over MPI."""
from .errors import *  # noqa: F401,F403
from .dace_compat.semantics import numpy_semantics
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
           "schedule_from_shardings", "TorchProgram", "from_torch", "from_torch_train_step", "NoBlasWarning",
           "numpy_semantics"]
__version__ = "0.1.0"
