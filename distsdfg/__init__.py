"""distsdfg: automatic SPMD distribution of DaCe programs over MPI."""
from .errors import *  # noqa: F401,F403
from . import blas as _blas
from .blas import NoBlasWarning
from .schedule import Schedule
from .kernels import MapInfo
from .plan import CommStep
from .redistribute import CommPlan
from .api import maps, lower, compile, comm_report, comm_plans, schedule_by_label, auto_schedule, schedule_cost, explain
from .costmodel import PaperModel, BytesModel, AlphaBetaModel, calibrate
from .placement import ArrayLayout, layout
from .sharding import schedule_from_shardings
from .torch_frontend import TorchProgram, from_torch
from .torch_training import from_torch_train_step

__all__ = ["Schedule", "MapInfo", "CommStep", "CommPlan", "maps", "lower", "compile", "comm_report", "comm_plans",
           "schedule_by_label", "auto_schedule", "schedule_cost", "explain", "PaperModel", "BytesModel",
           "AlphaBetaModel", "calibrate", "ScheduleError", "DistributedLoweringError", "ArrayLayout", "layout",
           "schedule_from_shardings", "TorchProgram", "from_torch", "from_torch_train_step", "NoBlasWarning"]
__version__ = "0.1.0"

_blas.configure()     # DaCe's BLAS nodes use OpenBLAS or MKL in every process that imports distsdfg
