"""The planner's default cost model: seconds, from each rank's compute and the communication.

:class:`TimeModel` prices a vertex of the EinGraph under a split as the time of one rank's
block of it plus the alpha-beta time of the communication :class:`~.costmodel.BytesModel`
counts for it, and an edge as the alpha-beta time of its redistribution:

- **compute**: a contraction (two inputs, a label that no output carries: MatMul, einsum, the
  einsum maps the lowering turns into one matrix product) takes ``2 m n k`` flops per batch at
  the calibrated GEMM rate, derated for thin blocks: a ``(m, n, k)`` product runs at
  ``gemm * m/(m+hm) * n/(n+hn) * k/(k+hk)`` (``gemm_half``; float32 at twice the float64 rate).
  Every other kernel (element-wise maps, reductions, resets) streams the bytes of its blocks
  (inputs and outputs) at the calibrated memory bandwidth. The block is the largest rank's
  (``ceil(extent / parts)`` per label), so uneven splits are priced.
- **scatter, gather, reduce at rank 0**: rank 0 sends or receives every block in turn:
  ``alpha`` per collective plus ``beta`` per byte of the whole; blocks that are not one run of
  the array are packed or unpacked at memory bandwidth (read and write), partial sums added
  there (read two, write one per element).
- **edges** (repartition, partial-sum combination between kernels): the ranks exchange in
  parallel: ``alpha`` plus ``beta`` per byte per rank, plus the additions of partial sums.

Rates come from a calibration file (``distsdfg calibrate``; ``$DISTSDFG_CALIBRATION`` or
``~/.cache/distsdfg/calibration.json``) or :data:`DEFAULTS`. Schedules of equal time are
broken by ``BytesModel.tie`` (scaled below a nanosecond in total), as in the bytes model.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Dict, Optional, Tuple, Union

import numpy as np

from ..analysis.eingraph import Vertex
from ..errors import OptionError
from ..values.modes import Placement, StepKind
from .costmodel import (AlphaBetaModel, BytesModel, Cost, CostModel, PaperModel, _calibration_path, _ranks, block_size,
                        sub_bounds)
from .layoutcost import root_bytes, signature, strided_elements

__all__ = ["Rates", "DEFAULTS", "TimeModel", "load_rates", "calibration_path", "measure_compute", "get_model",
           "MODELS"]


@dataclasses.dataclass(frozen=True)
class Rates:
    """What one rank can do. ``gemm``: float64 flop/s of a large matrix product on one core;
    ``gemm_half``: the (m, n, k) extents at which a product's rate halves; ``memory``: bytes/s
    (reads plus writes) an element-wise kernel streams; ``alpha``: seconds per collective call;
    ``beta``: seconds per byte; ``source``: where the numbers come from."""
    gemm: float = 30e9
    gemm_half: Tuple[float, float, float] = (16.0, 16.0, 16.0)
    memory: float = 8e9
    alpha: float = 5e-6
    beta: float = 4e-10
    source: str = "defaults"

    def gemm_seconds(self, m: int, n: int, k: int, batch: int = 1, itemsize: int = 8) -> float:
        if min(m, n, k, batch) <= 0:
            return 0.0
        hm, hn, hk = self.gemm_half
        eff = m / (m + hm) * n / (n + hn) * k / (k + hk)
        rate = self.gemm * (2.0 if itemsize <= 4 else 8.0 / itemsize) * eff
        return 2.0 * m * n * k * batch / rate

    def stream_seconds(self, nbytes: float) -> float:
        return nbytes / self.memory

    def to_dict(self) -> Dict:
        d = dataclasses.asdict(self)
        d["gemm_half"] = list(self.gemm_half)
        d.pop("source")
        return d

    def describe(self) -> str:
        h = ", ".join(f"{x:.0f}" for x in self.gemm_half)
        return (f"GEMM {self.gemm / 1e9:.1f} GFLOP/s (float64; halves at m, n, k = {h}), memory "
                f"{self.memory / 1e9:.1f} GB/s, alpha {self.alpha * 1e6:.2f} us, beta {self.beta * 1e9:.3f} ns/B "
                f"({1 / self.beta / 1e9:.2f} GB/s) [{self.source}]")


#: Without a calibration file: one core of a current x86 server (AVX2 FMA, OpenBLAS DGEMM about
#: 30 GFLOP/s; a product with an extent of 16 runs at half that; element-wise kernels about
#: 8 GB/s of reads plus writes) and MPI over shared memory (5 us per collective, 2.5 GB/s).
DEFAULTS = Rates()


def calibration_path() -> str:
    """``$DISTSDFG_CALIBRATION``, else ``~/.cache/distsdfg/calibration.json``."""
    return _calibration_path()


_loaded: Dict[Tuple[str, float], Rates] = {}


def load_rates(path: Optional[str] = None) -> Rates:
    """The calibrated Rates (``path``, else ``calibration_path()``); :data:`DEFAULTS` where there
    is no file. A file with only ``alpha`` and ``beta`` (an older calibration) keeps the default
    compute rates."""
    p = path or calibration_path()
    try:
        key = (p, os.path.getmtime(p))
    except OSError:
        if path:
            raise
        return DEFAULTS
    if key not in _loaded:
        with open(p) as f:
            d = json.load(f)
        fields = {f.name for f in dataclasses.fields(Rates)} - {"source"}
        kw = {k: (tuple(float(x) for x in d[k]) if k == "gemm_half" else float(d[k])) for k in fields if k in d}
        _loaded[key] = dataclasses.replace(DEFAULTS, source=p, **kw)
    return _loaded[key]


def _tree(k: int) -> float:
    """Bytes the busiest member moves per byte of ``(k - 1)`` blocks when ``k`` ranks broadcast or
    reduce one block: all of them for two or three members, about two blocks' worth past that
    (MPI's scatter-allgather and reduce-scatter-gather algorithms for large messages)."""
    return 1.0 if k <= 3 else 2.0 / (k - 1)


def _scatter_bytes(sig, o, p: int, total: float) -> float:
    """Bytes on rank 0's path when it scatters layout ``sig`` of ``o`` (``total``: all ranks'
    blocks but its own): the distinct blocks one by one (Scatterv), then each group of ``k``
    replicas broadcasts its block (the groups in parallel)."""
    k = math.prod(n for n, role in sig if role == "R")
    if k <= 1 or not total:
        return total
    distinct = root_bytes(sig, o.shape, p, StepKind.GATHER) * o.itemsize
    groups = max(p // k, 1)
    return distinct + (total - distinct) / groups * _tree(k)


def _contraction(v: Vertex) -> Optional[Tuple[Tuple[str, ...], ...]]:
    """``(batch, m, n, k)`` labels of a vertex that is a product of two operands, else None."""
    if len(v.inputs) != 2 or len(v.outputs) != 1 or not v.agg:
        return None
    x, y = ({l for l in o.labels if l is not None} for o in v.inputs)
    z = {l for l in v.outputs[0].labels if l is not None}
    k = tuple(l for l in v.labels if l in x and l in y and l not in z)
    if not k:
        return None
    batch = tuple(l for l in v.labels if l in x and l in y and l in z)
    m = tuple(l for l in v.labels if l in x and l not in y)
    n = tuple(l for l in v.labels if l in y and l not in x)
    return batch, m, n, k


class TimeModel(CostModel):
    """Seconds per call: compute of one rank's block plus alpha-beta communication (module docstring)."""
    name = "time"
    tie_scale = 1e-9        # seconds: ties add less than a nanosecond in all

    def __init__(self, rates: Optional[Rates] = None, *, inputs: Union[Placement, str] = Placement.ROOT,
                 memory_limit: Optional[int] = None):
        super().__init__(inputs=inputs, memory_limit=memory_limit)
        self.rates = rates or load_rates()
        self.base = BytesModel(inputs=inputs, memory_limit=memory_limit)

    def value(self, c: Cost) -> float:
        return c.seconds

    def compute(self, v: Vertex, split) -> float:
        """Seconds of the largest rank's block of ``v``."""
        blk = dict(zip(v.labels, sub_bounds(v.bounds, [split.get(l, 1) for l in v.labels])))
        c = _contraction(v)
        if c is not None:
            batch, m, n, k = (math.prod(blk[l] for l in ls) for ls in c)
            return self.rates.gemm_seconds(m, n, k, batch, v.outputs[0].itemsize)
        sec = self.rates.stream_seconds(sum(block_size(o, split) * o.itemsize for o in v.inputs + v.outputs))
        if v.work is not None:       # loops and maps in the body: one element's time per innermost execution
            item = max((o.itemsize for o in v.inputs + v.outputs), default=8)
            execs = v.work.block(dict(zip(v.labels, v.bounds)), {l: split.get(l, 1) for l in v.labels})
            sec = max(sec, self.rates.stream_seconds(execs * item))
        return sec

    def vertex(self, g, v, split):
        r, p = self.rates, _ranks(v, split)
        sec, nbytes, calls = self.compute(v, split), 0.0, 0
        k = math.prod(split.get(l, 1) for l in v.agg)
        if self.inputs == Placement.ROOT:
            for arr in g.program_inputs.get(v.index, []):
                o = g.operand(v.index, arr, output=False)
                sig = signature(v, split, o, partial=False)
                n = root_bytes(sig, o.shape, p, StepKind.SCATTER) * o.itemsize
                packed = strided_elements(sig, tuple(o.shape), p) * o.itemsize if n else 0
                sec += r.alpha * (n > 0) + r.beta * _scatter_bytes(sig, o, p, n) + r.stream_seconds(2 * packed)
                nbytes, calls = nbytes + n, calls + int(n > 0)
        for arr in g.program_outputs.get(v.index, []):
            o = g.operand(v.index, arr, output=True)
            sig = signature(v, split, o, partial=v.partial)
            red = root_bytes(sig, o.shape, p, StepKind.REDUCE) * o.itemsize
            if red:          # groups of k partial blocks reduce in parallel (a tree past two members)
                groups = max(p // max(k, 1), 1)
                sec += r.alpha + (r.beta * _tree(k) + r.stream_seconds(3)) * red / groups
            if self.inputs == Placement.ROOT:
                gat = root_bytes(sig, o.shape, p, StepKind.GATHER) * o.itemsize
                unpacked = strided_elements(sig, tuple(o.shape), p) * o.itemsize if gat else 0
                sec += r.alpha * (gat > 0) + r.beta * gat + r.stream_seconds(2 * unpacked)
            else:
                gat = 0
            nbytes, calls = nbytes + red + gat, calls + int(red > 0) + int(gat > 0)
        return Cost(nbytes, calls, sec)

    def tie(self, g, v, split):
        return self.base.tie(g, v, split)

    def edge(self, g, e, su, sv):
        b = float(self.base.edge_costs(g, e, [su], [sv])[0, 0])
        return Cost(b, int(b > 0), float(self.edge_costs(g, e, [su], [sv])[0, 0]))

    def edge_costs(self, g, e, sus, svs):
        u, v = g.vertices[e.src], g.vertices[e.dst]
        r = self.rates
        if e.acc and u.constant and self.inputs == Placement.ROOT:
            # A reset every rank fills in place: free where its blocks are the accumulator's, else
            # priced as filling the accumulator's block once more (the lowering keeps them apart).
            prod, cons = e.producer(g), e.consumer(g)
            ids: Dict[Tuple, int] = {}
            src = np.array([ids.setdefault(signature(u, su, prod, partial=False), len(ids)) for su in sus])
            dst = np.array([ids.setdefault(signature(v, sv, cons, partial=False), len(ids)) for sv in svs])
            fill = np.array([r.stream_seconds(block_size(cons, sv) * cons.itemsize) for sv in svs])
            return np.where(src[:, None] == dst[None, :], 0.0, fill[None, :])
        b = self.base.edge_costs(g, e, sus, svs)           # bytes, all ranks together
        p = np.array([max(_ranks(v, sv), 1) for sv in svs], dtype=float)[None, :]
        per_rank = r.beta
        if u.partial and not e.via_input:   # partial sums are added where they arrive
            per_rank += 3.0 / r.memory
        return r.alpha * (b > 0) + per_rank * b / p

    def fits(self, v, split):
        return self.base.fits(v, split)


#: The names ``get_model`` (and ``auto_schedule``'s ``cost_model``) accept; the first is the default.
MODELS = ("time", "bytes", "paper", "alpha-beta")


def get_model(model, *, inputs: Union[Placement, str] = Placement.ROOT,
              memory_limit: Optional[int] = None) -> CostModel:
    """A CostModel from a name (``MODELS``; None: 'time') or an instance."""
    if isinstance(model, CostModel):
        return model
    if model in (None, "time"):
        return TimeModel(inputs=inputs, memory_limit=memory_limit)
    if model == "bytes":
        return BytesModel(inputs=inputs, memory_limit=memory_limit)
    if model == "paper":
        return PaperModel(inputs=Placement.DISTRIBUTED, memory_limit=memory_limit)
    if model == "alpha-beta":
        base = BytesModel(inputs=inputs, memory_limit=memory_limit)
        try:
            return AlphaBetaModel.from_file(base=base)
        except (OSError, KeyError):
            return AlphaBetaModel(base=base)
    raise OptionError(f"unknown cost model {model!r}: use one of {', '.join(repr(m) for m in MODELS)} or a CostModel")


# -- calibration of the compute rates -----------------------------------------------------------------
def _best_time(fn, repeats: int) -> float:
    import time
    fn()
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_compute(*, size: int = 1024, thin: int = 32, repeats: int = 7) -> Dict:
    """GEMM rate (NumPy's ``matmul`` on float64, the BLAS of this process, one thread when the
    launcher set it), the half-rate extents from thin products (``thin`` in one of m, n, k, ``size``
    in the others) and the streaming bandwidth of an element-wise add (bytes read plus written).
    Each thin product is timed interleaved with the square one (best of ``repeats`` each), so that
    a shared machine's load moves both alike."""
    import time
    rng = np.random.default_rng(0)

    def case(m, n, k):
        a, b, c = rng.random((m, k)), rng.random((k, n)), np.empty((m, n))
        np.matmul(a, b, out=c)
        return 2.0 * m * n * k, lambda: np.matmul(a, b, out=c)

    def best_pair(f1, f2):
        t1 = t2 = math.inf
        for _ in range(repeats):
            for i, f in enumerate((f1, f2)):
                t0 = time.perf_counter()
                f()
                dt = time.perf_counter() - t0
                t1, t2 = (min(t1, dt), t2) if i == 0 else (t1, min(t2, dt))
        return t1, t2

    flops, square = case(size, size, size)
    full, halves = 0.0, []
    for shape in ((thin, size, size), (size, thin, size), (size, size, thin)):
        fl, f = case(*shape)
        ts, tt = best_pair(square, f)
        full = max(full, flops / ts)
        q = min((fl / tt) / (flops / ts), 0.999)
        # thin/(thin+h) = q * size/(size+h), solved for h
        h = size * thin * (1 - q) / max(q * size - thin, 1e-9)
        halves.append(float(min(max(h, 1.0), 4.0 * size)))
    n = 1 << 22
    x, y, z = rng.random(n), rng.random(n), np.empty(n)
    memory = 3 * 8 * n / _best_time(lambda: np.add(x, y, out=z), repeats)
    eff = math.prod(size / (size + h) for h in halves)      # the large product's own derating
    return {"gemm": float(full / eff), "gemm_half": halves, "memory": float(memory)}
