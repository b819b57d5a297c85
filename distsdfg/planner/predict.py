"""Predicted time per call past this machine: a lowered plan priced on a machine model.

``predict(sdfg, machine, nprocs=P, **sizes)`` prices one call of a lowered program on ``P`` ranks:

* **communication**, step by step from ``comm_report(summary=True)``: every MPI call costs its
  busiest rank ``alpha`` per message it sends or receives plus ``beta`` per byte
  (``max(max_sent, max_received)``), times the call's repeats. Messages per busiest rank: the
  root of a Scatterv or Gatherv talks to every member (MPICH sends them one by one); Bcast,
  Reduce and Allreduce take ``ceil(log2 P)`` rounds; Alltoall and point-to-point steps one
  message per pair a rank is in.
* **computation**, kernel by kernel from the planner's EinGraph: a kernel's iterations and the
  bytes of its operands, divided by its grid's size, priced as a roofline
  ``max(flops / flop_rate, bytes / memory_bandwidth)``; a contraction (a label that no output
  carries, e.g. MatMul's ``k``) counts two flops per iteration, anything else one. Kernels in
  loops count their trip count.

The result is a :class:`Prediction` (seconds, split into communication and computation, and
the steps). ``predict_curve`` lowers a fresh SDFG per rank count (the auto schedule, or a
schedule function) and prices each; ``distsdfg predict`` prints such a curve.

:class:`Machine` presets: ``this-machine`` (one core of the 2-core development machine: MKL's
DGEMM on one core, its ``memcpy`` bandwidth, alpha and beta of the bundled MPICH on shared
memory; ``distsdfg calibrate`` measures alpha and beta again, and a calibration file replaces
them) and ``daint-xc50`` (a Piz-Daint-like Cray XC50 node: one P100 GPU, Aries network).
A machine whose ranks share fewer cores than there are ranks (``cores``; 2 for this machine)
computes ``P / cores`` times slower per rank; partial sums cost their combination at memory
bandwidth. The model ignores overlap of communication and computation, network contention and
the root's copies into and out of the user's arrays, so it is an estimate of shape, not of the
last percent.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Union

from .. import dace_compat as dc
from ..analysis.eingraph import build_graph
from ..errors import OptionError
from ..lowering.placement import boundary_pricing
from ..lowering.pipeline import lower_sdfg
from .auto import auto_schedule
from ..solver.report import comm_report
from ..values.modes import Collective
from ..values.schedule import as_schedule
from ..solver.solve import lowered_of

__all__ = ["Machine", "PRESETS", "Prediction", "machine", "predict", "predict_curve", "format_curve"]


@dataclasses.dataclass(frozen=True)
class Machine:
    """What one rank can do: ``alpha`` seconds per message, ``beta`` seconds per byte it sends or
    receives, ``flop_rate`` flop/s and ``memory_bandwidth`` bytes/s for its kernels.

    ``cores``: the cores all ranks share (0: one core or device per rank, as on a cluster). When
    more ranks than cores run, every rank's kernels take ``P / cores`` times as long (MPICH's
    waiting ranks poll, so idle ranks take their share too)."""
    name: str
    alpha: float
    beta: float
    flop_rate: float
    memory_bandwidth: float
    cores: int = 0

    def __str__(self):
        shared = f", {self.cores} cores shared by all ranks" if self.cores else ""
        return (f"{self.name}: alpha {self.alpha * 1e6:.2f} us, beta {self.beta * 1e9:.3f} ns/B "
                f"({1 / self.beta / 1e9:.1f} GB/s), {self.flop_rate / 1e9:.0f} GFLOP/s, "
                f"{self.memory_bandwidth / 1e9:.0f} GB/s memory{shared}")

    def oversubscription(self, nprocs: int) -> float:
        """How much slower a rank computes with ``nprocs`` ranks on this machine's cores."""
        return max(1.0, nprocs / self.cores) if self.cores else 1.0

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "Machine":
        d = json.loads(text)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        return cls(**{k: d[k] for k in fields if k in d or fields[k].default is dataclasses.MISSING})


#: Machine models. ``this-machine``: measured here (MKL DGEMM 1024^3 on one core in 54 ms, about
#: 40 GFLOP/s; memcpy about 8 GB/s per core; MPICH on shared memory about 5 us and 2 GB/s per rank
#: under load). ``daint-xc50``: a Cray XC50 node of Piz Daint as in the thesis' figure 8.2 (one
#: NVIDIA P100: 4.7 TFLOP/s float64, 732 GB/s HBM2; Aries: about 1.5 us and 10 GB/s per node).
PRESETS: Dict[str, Machine] = {
    "this-machine": Machine("this-machine", alpha=5e-6, beta=1 / 2e9, flop_rate=40e9, memory_bandwidth=8e9, cores=2),
    "daint-xc50": Machine("daint-xc50", alpha=1.5e-6, beta=1 / 10e9, flop_rate=4.7e12, memory_bandwidth=732e9),
}


def machine(spec: Union[str, Machine, None] = None) -> Machine:
    """A Machine: one, a preset's name, or a JSON file (a Machine, or what ``distsdfg calibrate``
    writes, which then replaces this machine's alpha and beta, and its GEMM rate and memory
    bandwidth where the file has them)."""
    if isinstance(spec, Machine):
        return spec
    if spec is None:
        spec = "this-machine"
    if spec in PRESETS:
        return PRESETS[spec]
    if not os.path.exists(spec):
        raise OptionError(f"unknown machine {spec!r}: use one of {sorted(PRESETS)} or a JSON file")
    with open(spec) as f:
        text = f.read()
    d = json.loads(text)
    if "flop_rate" in d:
        return Machine.from_json(text)
    compute = {"flop_rate": float(d["gemm"]), "memory_bandwidth": float(d["memory"])} if "gemm" in d else {}
    return dataclasses.replace(PRESETS["this-machine"], name=f"this-machine ({os.path.basename(spec)})",
                               alpha=float(d["alpha"]), beta=float(d["beta"]), **compute)


@dataclasses.dataclass(frozen=True)
class Prediction:
    """Predicted seconds of one call on ``nprocs`` ranks, split into communication (per MPI call,
    in program order) and computation (per kernel)."""
    nprocs: int
    machine: str
    comm_seconds: float
    compute_seconds: float
    steps: tuple = ()            # (collective, array, seconds)
    kernels: tuple = ()          # (kernel key, grid size, seconds)

    @property
    def seconds(self) -> float:
        return self.comm_seconds + self.compute_seconds

    def __str__(self):
        return (f"P={self.nprocs:5d}  {self.seconds * 1e3:11.3f} ms  (communication {self.comm_seconds * 1e3:.3f} ms, "
                f"computation {self.compute_seconds * 1e3:.3f} ms)")


def _repeats(r) -> float:
    try:
        return float(r)
    except (TypeError, ValueError):
        return 1.0           # a trip count only known at run time: one run


def _messages(s) -> int:
    """Messages the busiest rank sends or receives in one run of the MPI call ``s`` (a CommSummary)."""
    if s.ranks <= 1 or (s.max_sent == 0 and s.max_received == 0):
        return 0
    if s.collective in (Collective.SCATTERV, Collective.GATHERV):
        return max(1, s.pairs)                       # the root, one member after the other
    if s.collective in (Collective.BCAST, Collective.REDUCE, Collective.ALLREDUCE, Collective.REDUCE_SCATTER,
                        Collective.ALLGATHERV):
        return max(1, math.ceil(math.log2(max(2, s.ranks))))
    return max(1, math.ceil(s.pairs / max(1, s.ranks)))     # Alltoall(v/w), Isend/Irecv: per rank


#: Collectives that combine what they receive with the operator (partial sums): the busiest rank
#: reads its own and the received values and writes the result, at memory bandwidth.
COMBINING = (Collective.REDUCE, Collective.ALLREDUCE, Collective.REDUCE_SCATTER, Collective.ALLTOALLV)


def comm_seconds(steps, m: Machine) -> List[tuple]:
    """(collective, array, seconds) of every MPI call (CommSummaries) on machine ``m``."""
    out = []
    for s in steps:
        t = m.alpha * _messages(s) + m.beta * max(s.max_sent, s.max_received)
        if s.collective in COMBINING:
            t += 3 * s.max_received / m.memory_bandwidth * m.oversubscription(s.nranks)
        out.append((s.collective, s.array, _repeats(s.repeats) * t))
    return out


def _contraction(v) -> bool:
    out_labels = {lab for o in v.outputs for lab in o.labels if lab}
    in_labels = {lab for i in v.inputs for lab in i.labels if lab}
    return bool(in_labels - out_labels)


def kernel_seconds(graph, grids: Dict[str, Sequence[int]], m: Machine) -> List[tuple]:
    """(key, ranks of its grid, seconds) of every kernel of the EinGraph ``graph`` under ``grids``."""
    out = []
    for v in graph.vertices:
        parts = math.prod(grids.get(v.key, ())) or 1
        iterations = math.prod(v.bounds) if v.bounds else 1
        flops = iterations * (2 if _contraction(v) else 1)
        data = sum(o.size * o.itemsize for o in list(v.inputs) + list(v.outputs))
        t = max(flops / m.flop_rate, data / m.memory_bandwidth) / parts
        out.append((v.key, parts, v.repeats * t))
    return out


def predict(sdfg, m: Union[str, Machine, None] = None, *, nprocs: Optional[int] = None, **sizes) -> Prediction:
    """Predicted time of one call of the lowered ``sdfg`` on ``nprocs`` ranks (default: its plan's)."""
    m = machine(m)
    low = lowered_of(sdfg)
    P = nprocs or low.nprocs
    steps = comm_seconds(comm_report(sdfg, nprocs=P, summary=True, **sizes), m)
    graph = build_graph(_source_sdfg(low), **sizes)
    grids = {key: kg.grid for kg in low.kernels for key in kg.keys}
    slow = m.oversubscription(P)
    kernels = [(key, parts, t * slow) for key, parts, t in kernel_seconds(graph, grids, m)]
    return Prediction(P, m.name, sum(t for *_, t in steps), sum(t for *_, t in kernels), tuple(steps), tuple(kernels))


def _source_sdfg(low):
    """The SDFG the program was lowered from (its kernels and sizes before rank tiling)."""
    return dc.from_json(low.source)


def predict_curve(make_sdfg: Callable[[], object], procs: Iterable[int], m: Union[str, Machine, None] = None, *,
                  schedule: Union[str, Callable[[object, int], object]] = "auto", placement=None,
                  **sizes) -> List[Prediction]:
    """Lower a fresh ``make_sdfg()`` for every rank count in ``procs`` (``schedule="auto"``: the
    planner's schedule; or a function ``(sdfg, P) -> schedule``) and predict each."""
    out = []
    for P in procs:
        sdfg = make_sdfg()
        if schedule == "auto":
            sched = auto_schedule(sdfg, P, inputs=boundary_pricing(placement), **sizes)
        else:
            sched = schedule(sdfg, P)
        lower_sdfg(sdfg, as_schedule(sched), placement=placement)     # distsdfg.lower for a given schedule
        out.append(predict(sdfg, m, nprocs=P, **sizes))
    return out


def format_curve(curve: Sequence[Prediction]) -> str:
    """One line per rank count, with the speedup over the first."""
    if not curve:
        return ""
    base = curve[0].seconds
    return "\n".join(f"{p}  speedup {base / p.seconds:8.2f}" for p in curve)
