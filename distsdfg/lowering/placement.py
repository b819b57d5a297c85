"""Placement at the program's boundary: which arguments stay distributed, and where each block lives.

In **root** placement (the default) rank 0 passes and receives every array whole; the program
scatters inputs and gathers outputs. In **distributed** placement an argument is passed and
returned block by block: every rank passes only the block of the array it owns, in the layout
the schedule gives the array (its *home*, ``plan.HomeSpec``), and no scatter or gather is
generated for it. :func:`layout` tells every rank which global slice it owns;
:class:`ArrayLayout` cuts a rank's block out of a global array, assembles the global array
from blocks, and reads or writes a rank's block of a ``.npy`` file without reading the rest.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from typing import Dict, Mapping, Optional, Sequence, Set, Tuple, Union

import numpy as np
import sympy
from dace import data as dt
from dace.sdfg import SDFG, nodes

from .. import dace_compat as dc
from ..checks import positive_int
from ..errors import PlacementError
from ..values.plan import evaluate
from ..solver.solve import given_values, lowered_of, planned, solve_homes, symbol_values

__all__ = ["PLACEMENTS", "placed_arrays", "boundary_pricing", "global_sizes", "ArrayLayout", "layout"]

PLACEMENTS = ("root", "distributed")
PlacementLike = Union[None, str, Mapping[str, str]]


def _candidates(sdfg: SDFG) -> Dict[str, Optional[str]]:
    """Arguments and why each cannot be distributed (None: it can)."""
    out = {}
    for name, desc in sdfg.arrays.items():
        if desc.transient or isinstance(desc, dt.View):
            continue
        if isinstance(desc, dt.Scalar):
            out[name] = "it is a scalar (every rank passes the same value)"
        elif sympy.sympify(desc.total_size) == 1:
            out[name] = "it has one element (such arrays are kept valid on every rank)"
        else:
            out[name] = None
    return out


def placed_arrays(sdfg: SDFG, placement: PlacementLike) -> Set[str]:
    """The arguments of ``sdfg`` in distributed placement.

    ``placement``: None or ``"root"`` (none), ``"distributed"`` (every argument array that can
    be: scalars and one-element arrays stay replicated), or a dict ``{array: "root" |
    "distributed"}`` whose key ``"*"`` sets the default for the arrays not named.
    """
    if placement is None:
        return set()
    if not isinstance(placement, (str, Mapping)):
        raise PlacementError(f"placement is {placement!r}: use 'root', 'distributed' or a dict "
                             f"{{array: 'root' | 'distributed', '*': default}}")
    cands = _candidates(sdfg)
    if isinstance(placement, str):
        placement = {"*": placement}
    default = placement.get("*", "root")
    out = set()
    for name, where in placement.items():
        if where not in PLACEMENTS:
            raise PlacementError(f"placement of `{name}` is {where!r}; use one of {PLACEMENTS}")
        if name == "*":
            continue
        if name not in cands:
            args = ", ".join(sorted(cands)) or "none"
            raise PlacementError(f"placement names `{name}`, which is not an argument array of `{sdfg.name}` "
                                 f"(its arguments: {args})")
        if where == "distributed" and cands[name] is not None:
            raise PlacementError(f"`{name}` cannot be placed distributed: {cands[name]}; leave it at root")
        if where == "distributed":
            out.add(name)
    if default == "distributed":
        out |= {n for n, why in cands.items() if why is None and n not in placement}
    return out


def kept_at_root(placed: Set[str], why: Mapping[str, str], placement: PlacementLike, program: str) -> Set[str]:
    """``placed`` less the arrays of ``why`` (array -> why rank 0 keeps it whole: the program reads it
    through slices it keeps whole on rank 0, such as ``data[:, i]`` taken inside a loop, or a loop on
    rank 0 updates it): such an array is passed whole at rank 0. An array the placement names
    explicitly is refused instead, so that what a user asked for never silently changes."""
    drop = {a for a in why if a in placed}
    named = sorted(a for a in drop if isinstance(placement, Mapping) and placement.get(a) == "distributed")
    if named:
        raise PlacementError(f"`{named[0]}` of `{program}` cannot be placed distributed: {why[named[0]]}; leave it "
                             f"at root (placement={{'{named[0]}': 'root', ...}})")
    return placed - drop


def rank0_reasons(sdfg: SDFG, viewed: Set[str], kernel_nodes) -> Dict[str, str]:
    """Why rank 0 keeps an argument whole while the program runs (see ``kept_at_root``): read through
    slices that stay on rank 0 (``viewed``; results are written there, never read first), or accessed by
    something other than a distributed kernel inside a loop (every iteration would move it)."""
    from ..analysis.controlflow import loop_trips
    why = {a: "the program reads it through slices (views) that the lowering keeps whole on rank 0"
           for a in viewed if not a.startswith("__return")}
    for st, (count, _) in loop_trips(sdfg).items():
        if str(count) == "1":
            continue
        kernel_nodes = set(kernel_nodes) | {st.exit_node(n) for n in kernel_nodes
                                            if isinstance(n, nodes.EntryNode) and n in st.nodes()}
        for n in dc.top_level_nodes(st):
            if n in kernel_nodes or isinstance(n, nodes.AccessNode) and all(
                    e.dst in kernel_nodes or e.src in kernel_nodes for e in st.all_edges(n)):
                continue
            edges = list(st.all_edges(n))
            if isinstance(n, nodes.EntryNode):
                edges += st.all_edges(st.exit_node(n))
            for e in edges:
                if e.data.is_empty():
                    continue
                touched = {e.data.data} | {x.data for x in (e.src, e.dst) if isinstance(x, nodes.AccessNode)}
                for a in touched - {None}:
                    why.setdefault(a, "a loop on rank 0 reads or writes it (each iteration would move the whole "
                                      "array)")
    return why


def boundary_pricing(placement: PlacementLike) -> str:
    """The planner's ``inputs=`` for a placement: boundaries free unless everything is at root."""
    return "root" if placement in (None, "root") else "distributed"


def global_sizes(program, inputs: Mapping[str, object], given: Mapping[str, int] = {}) -> Dict[str, int]:
    """Size symbols of a compiled program read off global arrays (blocks do not tell them)."""
    original = dc.from_json(program.lowered.source)
    arrays = {k: v for k, v in inputs.items() if isinstance(v, np.ndarray)}
    return {k: v for k, v in symbol_values(original, arrays, dict(given)).items() if k in original.symbols}


@dataclasses.dataclass(frozen=True)
class ArrayLayout:
    """Where the blocks of one array live at the program's boundary, for concrete sizes.

    ``blocks[q]`` is rank q's block as ``(start, stop)`` per dimension, or None when rank q
    passes nothing (an empty array). Blocks may repeat: ranks with equal blocks hold replicas
    and must pass equal values; the first of them (``primary``) is the one to write back.
    """
    array: str
    shape: Tuple[int, ...]
    dtype: str
    placement: str
    blocks: Tuple[Optional[Tuple[Tuple[int, int], ...]], ...]

    @property
    def nprocs(self) -> int:
        return len(self.blocks)

    def slices(self, rank: int) -> Optional[Tuple[slice, ...]]:
        b = self.blocks[rank]
        return None if b is None else tuple(slice(a, e) for a, e in b)

    def block_shape(self, rank: int) -> Tuple[int, ...]:
        b = self.blocks[rank]
        return (0,) * len(self.shape) if b is None else tuple(e - a for a, e in b)

    def replicas(self, rank: int) -> Tuple[int, ...]:
        """The ranks holding the same block as ``rank`` (itself included), in rank order."""
        b = self.blocks[rank]
        return () if b is None else tuple(q for q, o in enumerate(self.blocks) if o == b)

    def primary(self, rank: int) -> bool:
        reps = self.replicas(rank)
        return bool(reps) and reps[0] == rank

    def block(self, array: np.ndarray, rank: int) -> np.ndarray:
        """Rank ``rank``'s block of the global ``array`` (a contiguous copy)."""
        if tuple(array.shape) != self.shape:
            raise PlacementError(f"`{self.array}` has shape {self.shape}, got an array of shape {array.shape}")
        s = self.slices(rank)
        if s is None:
            return np.empty(self.block_shape(rank), dtype=array.dtype)
        return np.array(array[s], copy=True, order="C")

    def empty(self, rank: int) -> np.ndarray:
        """An uninitialised block for ``rank`` (an output argument)."""
        return np.empty(self.block_shape(rank), dtype=self.dtype)

    def assemble(self, blocks: Sequence[np.ndarray]) -> np.ndarray:
        """The global array from every rank's block (``comm.gather`` them first; for checks)."""
        if len(blocks) != self.nprocs:
            raise PlacementError(f"`{self.array}`: {len(blocks)} blocks given for {self.nprocs} ranks")
        out = np.empty(self.shape, dtype=self.dtype)
        seen = np.zeros(self.shape, dtype=bool)
        for q, blk in enumerate(blocks):
            s = self.slices(q)
            if s is None or not self.primary(q):
                continue
            if tuple(blk.shape) != self.block_shape(q):
                raise PlacementError(f"`{self.array}`: rank {q}'s block has shape {blk.shape}, expected "
                                     f"{self.block_shape(q)}")
            out[s] = blk
            seen[s] = True
        if not seen.all():
            raise PlacementError(f"`{self.array}`: the blocks do not cover the array")
        return out

    # -- .npy files, one block per rank, never the whole array in memory ------------------------
    def load(self, path: str, rank: int) -> np.ndarray:
        """Read rank ``rank``'s block of the ``.npy`` file ``path`` (memory-mapped: only the block's
        bytes are read)."""
        mm = np.load(path, mmap_mode="r")
        if tuple(mm.shape) != self.shape or mm.dtype != np.dtype(self.dtype):
            raise PlacementError(f"{path} holds {mm.dtype}{list(mm.shape)}, `{self.array}` is "
                                 f"{self.dtype}{list(self.shape)}")
        s = self.slices(rank)
        out = self.empty(rank)
        if s is not None:
            out[...] = mm[s]
        del mm
        return out

    def save(self, path: str, block: np.ndarray, rank: int, comm=None) -> None:
        """Collective over ``comm`` (default ``MPI.COMM_WORLD``; pass the program's ``prog.comm``
        when it runs on another): write every rank's block into the ``.npy`` file ``path`` (rank 0
        creates it; replicas write once). No rank holds more than its block."""
        from mpi4py import MPI
        comm = comm if comm is not None else MPI.COMM_WORLD
        if comm.size != self.nprocs:
            raise PlacementError(f"saving `{self.array}`: its layout is for {self.nprocs} ranks but the communicator "
                                 f"has {comm.size}; pass the program's communicator (save(..., comm=prog.comm))")
        if comm.rank == 0:
            np.lib.format.open_memmap(path, mode="w+", dtype=np.dtype(self.dtype), shape=self.shape).flush()
        comm.Barrier()
        s = self.slices(rank)
        if s is not None and self.primary(rank):
            mm = np.load(path, mmap_mode="r+")
            mm[s] = block
            mm.flush()
            del mm
        comm.Barrier()

    # -- data --------------------------------------------------------------------------------------
    def __str__(self):
        lines = [f"{self.array}: {self.dtype}{list(self.shape)}, {self.placement} placement over {self.nprocs} ranks"]
        for q, b in enumerate(self.blocks):
            if b is None:
                lines.append(f"  rank {q}: nothing")
                continue
            sl = ", ".join(f"{a}:{e}" for a, e in b)
            reps = self.replicas(q)
            rep = f"  (replicated on ranks {list(reps)})" if len(reps) > 1 else ""
            lines.append(f"  rank {q}: [{sl}]{rep}")
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "ArrayLayout":
        d = json.loads(text)
        blocks = tuple(None if b is None else tuple(tuple(x) for x in b) for b in d["blocks"])
        return cls(d["array"], tuple(d["shape"]), d["dtype"], d["placement"], blocks)


def _default_nprocs(low) -> int:
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized():
        return mpi.COMM_WORLD.size
    return low.nprocs


def layout(sdfg, array: str, *, nprocs: Optional[int] = None, **sizes) -> ArrayLayout:
    """Which global block of ``array`` every rank passes and receives at the program's boundary.

    ``sdfg``: a lowered SDFG or a compiled program; ``nprocs``: the ranks it runs on (default:
    the MPI world's size when MPI is running, else the schedule's); ``sizes``: the values of
    the size symbols (``N=4096``).
    """
    if hasattr(sdfg, "lowered") and hasattr(sdfg, "comm"):    # a compiled program (runtime.DistributedProgram)
        nprocs = nprocs or sdfg.comm.size
        # A program planned at its first call: the one for these sizes (collective when new).
        sdfg = sdfg.program_for(**sizes).sdfg if hasattr(sdfg, "program_for") else sdfg.sdfg
    values = given_values(sdfg, sizes, "layout")
    sdfg = planned(sdfg, values, "layout")      # planned at the first call: a copy planned for these sizes
    low = lowered_of(sdfg)
    P = positive_int(nprocs, "layout(nprocs=...)") if nprocs is not None else _default_nprocs(low)
    home = low.boundary.get(array)
    if home is not None:
        spec = next(h for h in low.homes if h.name == home)
        desc_dtype = sdfg.arrays[array].dtype
        try:
            sol = solve_homes([spec], values, P)[home]
            shape = tuple(evaluate(s, values) for s in spec.global_shape)
        except KeyError as exc:
            raise PlacementError(f"layout of `{array}`: {exc.args[0]}; pass the sizes, e.g. "
                                 f"layout(sdfg, {array!r}, N=...)") from None
        blocks = tuple(tuple((a, a + n) for a, n in zip(b.start, b.size)) if b.count and all(b.size) else None
                       for b in sol.owned)
        return ArrayLayout(array, shape, np.dtype(desc_dtype.as_numpy_dtype()).name, "distributed", blocks)
    desc = sdfg.arrays.get(array)
    if desc is None or desc.transient:
        raise PlacementError(f"`{array}` is not an argument of `{low.original_name}`")
    try:
        shape = tuple(evaluate(str(s), values) for s in desc.shape)
    except KeyError as exc:
        raise PlacementError(f"layout of `{array}`: {exc.args[0]}; pass the sizes") from None
    whole = tuple((0, n) for n in shape)
    return ArrayLayout(array, shape, np.dtype(desc.dtype.as_numpy_dtype()).name, "root",
                       (whole,) + (None,) * (P - 1))
