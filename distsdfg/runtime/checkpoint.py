"""Checkpoints: a program's arrays saved by its P ranks into one directory of ``.npy`` blocks and a JSON index,
read back on any number of ranks in any layout, each rank reading only the blocks it needs.

A checkpoint directory (an MLP's AdamW step saved from 4 ranks, weights and moments split by rows)::

    index.json                   # written last, by rank 0: the checkpoint is complete when it exists
    fc1_weight.0.npy             # rows 0:16 of `fc1.weight`, the block rank 0 held
    fc1_weight.1.npy             # rows 16:32, rank 1's
    ...
    fc2_bias.npy                 # a tensor one rank held whole: one file, no block number
    optim_step.npy

and its index::

    {"format": "distsdfg-checkpoint", "version": 1, "program": "torchstep", "ranks": 4,
     "tensors": [{"name": "fc1.weight", "argument": "fc1_weight", "kind": "parameter", "shape": [64, 16],
                  "dtype": "float32", "blocks": [{"file": "fc1_weight.0.npy", "start": [0, 0], "stop": [16, 16]},
                                                 ...]},
                 ...]}

Every file is a plain ``.npy`` array of its block's shape (``stop - start``); a tensor's blocks are disjoint
and cover it. Replicated blocks are written once (by the first rank holding them).
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import CheckpointError, CheckpointMismatchError
from ..lowering.placement import ArrayLayout

__all__ = ["INDEX", "Tensor", "BlockFile", "TensorEntry", "CheckpointIndex", "program_layouts", "whole_layouts",
           "writers", "index_for", "write_blocks", "clear_previous", "write_index", "read_index", "check_fits",
           "read_blocks", "save_checkpoint", "load_checkpoint"]

INDEX = "index.json"
FORMAT = "distsdfg-checkpoint"
VERSION = 1

Box = Tuple[Tuple[int, int], ...]


def _spelled(dtype: str, shape) -> str:
    return f"{dtype}{list(shape)}"


@dataclasses.dataclass(frozen=True)
class Tensor:
    """A tensor of the checkpoint: its ``name`` there, the program ``argument`` that holds it, its ``kind``."""
    name: str
    argument: str
    kind: str = "array"


@dataclasses.dataclass(frozen=True)
class BlockFile:
    """One ``.npy`` file of a tensor: its elements ``start[d]:stop[d]`` in every dimension ``d``."""
    file: str
    start: Tuple[int, ...]
    stop: Tuple[int, ...]

    @property
    def box(self) -> Box:
        return tuple(zip(self.start, self.stop))

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(e - a for a, e in self.box)


def _volume(box: Box) -> int:
    return int(np.prod([e - a for a, e in box], dtype=np.int64))


def _overlap(a: Box, b: Box) -> Optional[Box]:
    out = tuple((max(x0, y0), min(x1, y1)) for (x0, x1), (y0, y1) in zip(a, b))
    return out if all(s < e for s, e in out) else None


@dataclasses.dataclass(frozen=True)
class TensorEntry:
    """One tensor of the index: its name, the argument it was saved from, its kind (``parameter``,
    ``state``, ...), global shape and dtype, and the files of its blocks."""
    name: str
    argument: str
    kind: str
    shape: Tuple[int, ...]
    dtype: str
    blocks: Tuple[BlockFile, ...]

    def validate(self) -> None:
        """Blocks within the shape, disjoint, covering it; else ``CheckpointError`` naming the tensor."""
        whole = tuple((0, n) for n in self.shape)
        for b in self.blocks:
            if len(b.start) != len(self.shape) or _overlap(b.box, whole) != b.box:
                raise CheckpointError(f"`{self.name}`: block {b.file} ({list(b.start)}:{list(b.stop)}) lies outside "
                                      f"its shape {list(self.shape)}")
        for i, b in enumerate(self.blocks):
            for c in self.blocks[i + 1:]:
                if _overlap(b.box, c.box):
                    raise CheckpointError(f"`{self.name}`: blocks {b.file} and {c.file} overlap")
        if sum(_volume(b.box) for b in self.blocks) != _volume(whole):
            raise CheckpointError(f"`{self.name}`: its blocks do not cover its shape {list(self.shape)}")

    def read(self, directory: str, box: Optional[Box] = None) -> np.ndarray:
        """The tensor's elements in ``box`` (``(start, stop)`` per dimension; the whole tensor by default),
        read through memory maps of the files it overlaps: only those files, only those bytes."""
        box = tuple((0, n) for n in self.shape) if box is None else tuple(tuple(map(int, d)) for d in box)
        if len(box) != len(self.shape) or any(a < 0 or e > n or a > e for (a, e), n in zip(box, self.shape)):
            raise CheckpointError(f"`{self.name}`: the block {[list(d) for d in box]} lies outside its shape "
                                  f"{list(self.shape)}")
        out = np.empty(tuple(e - a for a, e in box), dtype=self.dtype)
        filled = 0
        for b in self.blocks:
            common = _overlap(box, b.box)
            if common is None:
                continue
            path = os.path.join(directory, b.file)
            try:
                mm = np.load(path, mmap_mode="r", allow_pickle=False)
            except (OSError, ValueError) as exc:
                raise CheckpointError(f"`{self.name}`: cannot read its block {path} ({exc})") from None
            if tuple(mm.shape) != b.shape or mm.dtype != np.dtype(self.dtype):
                raise CheckpointError(f"`{self.name}`: {path} holds {_spelled(mm.dtype.name, mm.shape)}, the index "
                                      f"says {_spelled(self.dtype, b.shape)}")
            out[tuple(slice(s - a, e - a) for (s, e), (a, _) in zip(common, box))] = \
                mm[tuple(slice(s - a, e - a) for (s, e), a in zip(common, b.start))]
            del mm
            filled += _volume(common)
        if filled != out.size:
            raise CheckpointError(f"`{self.name}`: its blocks do not cover {[list(d) for d in box]}")
        return out


@dataclasses.dataclass(frozen=True)
class CheckpointIndex:
    """The index of a checkpoint: the program it was saved from, on how many ranks, and its tensors."""
    program: str
    ranks: int
    tensors: Tuple[TensorEntry, ...]

    def entry(self, name: str) -> Optional[TensorEntry]:
        return next((t for t in self.tensors if t.name == name), None)

    def to_json(self) -> str:
        """The index as JSON: a line per tensor, a line per block."""
        head = json.dumps({"format": FORMAT, "version": VERSION, "program": self.program, "ranks": self.ranks})
        tensors = []
        for t in self.tensors:
            d = {k: v for k, v in dataclasses.asdict(t).items() if k != "blocks"}
            blocks = ",\n".join("    " + json.dumps({"file": b.file, "start": list(b.start), "stop": list(b.stop)})
                                for b in t.blocks)
            tensors.append(f"  {json.dumps(d)[:-1]}, \"blocks\": [\n{blocks}]}}")
        return head[:-1] + ",\n \"tensors\": [\n" + ",\n".join(tensors) + "]}\n"

    @classmethod
    def from_json(cls, text: str, where: str = "the index") -> "CheckpointIndex":
        try:
            d = json.loads(text)
            if d.get("format") != FORMAT or d.get("version") != VERSION:
                raise CheckpointError(f"{where} is not a {FORMAT} index of version {VERSION} (format "
                                      f"{d.get('format')!r}, version {d.get('version')!r})")
            tensors = tuple(TensorEntry(t["name"], t["argument"], t["kind"], tuple(int(n) for n in t["shape"]),
                                        np.dtype(t["dtype"]).name,
                                        tuple(BlockFile(b["file"], tuple(int(x) for x in b["start"]),
                                                        tuple(int(x) for x in b["stop"])) for b in t["blocks"]))
                            for t in d["tensors"])
            index = cls(str(d.get("program", "")), int(d.get("ranks", 1)), tensors)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            if isinstance(exc, CheckpointError):
                raise
            raise CheckpointError(f"{where} cannot be read as a checkpoint index: {type(exc).__name__}: "
                                  f"{exc}") from None
        for t in index.tensors:
            t.validate()
            if any(os.path.basename(b.file) != b.file or b.file in ("", ".", "..") for b in t.blocks):
                raise CheckpointError(f"`{t.name}`: {where} names block files outside its directory")
        return index


# -- how the ranks hold each argument ---------------------------------------------------------------

def program_layouts(program, arguments: Sequence[str]) -> Dict[str, ArrayLayout]:
    """How the ranks of a compiled ``program`` hold each argument between calls: their blocks in
    distributed placement (``program.layout``); a one-element array on every rank (every rank passes it);
    any other array whole on rank 0."""
    out = {}
    for a in arguments:
        lay = program.layout(a)
        if lay.placement != "distributed" and int(np.prod(lay.shape)) == 1:
            lay = dataclasses.replace(lay, blocks=(tuple((0, n) for n in lay.shape),) * lay.nprocs)
        out[a] = lay
    return out


def whole_layouts(specs: Mapping[str, Tuple[Tuple[int, ...], object]]) -> Dict[str, ArrayLayout]:
    """One process holding every argument whole: ``{argument: (shape, dtype)}``."""
    return {a: ArrayLayout(a, tuple(shape), np.dtype(dtype).name, "root", (tuple((0, n) for n in shape),))
            for a, (shape, dtype) in specs.items()}


def writers(layout: ArrayLayout) -> List[Tuple[int, Box]]:
    """``(rank, block)`` of the ranks that write ``layout``'s blocks: the first holder of each, in rank order."""
    return [(q, b) for q, b in enumerate(layout.blocks) if b is not None and layout.primary(q)]


def index_for(tensors: Sequence[Tensor], layouts: Mapping[str, ArrayLayout], program: str = "") -> CheckpointIndex:
    """The index of a checkpoint of ``tensors`` held as ``layouts`` say: a file per block (``<argument>.<k>.npy``,
    or ``<argument>.npy`` for a tensor one rank holds whole)."""
    entries = []
    for t in tensors:
        lay = layouts[t.argument]
        ws = writers(lay)
        whole = len(ws) == 1 and ws[0][1] == tuple((0, n) for n in lay.shape)
        blocks = tuple(BlockFile(f"{t.argument}.npy" if whole else f"{t.argument}.{k}.npy",
                                 tuple(a for a, _ in b), tuple(e for _, e in b)) for k, (_, b) in enumerate(ws))
        entry = TensorEntry(t.name, t.argument, t.kind, tuple(lay.shape), lay.dtype, blocks)
        entry.validate()
        entries.append(entry)
    nprocs = max([lay.nprocs for lay in layouts.values()] + [1])
    return CheckpointIndex(program, nprocs, tuple(entries))


# -- one rank's part ------------------------------------------------------------------------------------

def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_blocks(directory: str, index: CheckpointIndex, layouts: Mapping[str, ArrayLayout],
                 arrays: Mapping[str, np.ndarray], rank: int) -> List[str]:
    """Write the block files ``rank`` writes (its blocks that no lower rank also holds); returns their names."""
    written = []
    for entry in index.tensors:
        lay = layouts[entry.argument]
        for (q, box), bf in zip(writers(lay), entry.blocks):
            if q != rank:
                continue
            value = arrays.get(entry.argument)
            shape = tuple(e - a for a, e in box)
            if not isinstance(value, np.ndarray):
                raise CheckpointError(f"`{entry.name}`: rank {rank} holds its block {[list(d) for d in box]} but was "
                                      f"not given the array `{entry.argument}`")
            if value.size == 1 == int(np.prod(shape)):
                value = value.reshape(shape)
            if tuple(value.shape) != shape or value.dtype != np.dtype(entry.dtype):
                raise CheckpointError(f"`{entry.name}`: rank {rank}'s block is {_spelled(entry.dtype, shape)}, the "
                                      f"array `{entry.argument}` it was given is "
                                      f"{_spelled(value.dtype.name, value.shape)}")
            with open(os.path.join(directory, bf.file), "wb") as f:
                np.lib.format.write_array(f, np.ascontiguousarray(value), allow_pickle=False)
                f.flush()
                os.fsync(f.fileno())
            written.append(bf.file)
    return written


def clear_previous(directory: str) -> None:
    """Make ``directory`` ready for a checkpoint: create it; of a checkpoint already there, remove the index
    first (from then on it is no longer taken for a complete one), then the files that index names."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise CheckpointError(f"{directory} exists and is not a directory")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, INDEX)
    if not os.path.exists(path):
        return
    try:
        old = read_index(directory)
    except CheckpointError:
        old = None
    os.remove(path)
    _fsync_dir(directory)
    for t in old.tensors if old else ():
        for b in t.blocks:
            f = os.path.join(directory, b.file)
            if os.path.isfile(f):
                os.remove(f)


def write_index(directory: str, index: CheckpointIndex) -> None:
    """Write ``index.json`` atomically (a temporary file renamed over it), after every block exists."""
    tmp = os.path.join(directory, f".{INDEX}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(index.to_json())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(directory, INDEX))
    _fsync_dir(directory)


def read_index(directory: str) -> CheckpointIndex:
    """The index of the checkpoint in ``directory``; ``CheckpointError`` when there is none (not a checkpoint,
    or one whose saving did not finish) or it cannot be read."""
    path = os.path.join(directory, INDEX)
    if not os.path.isfile(path):
        what = "does not exist" if not os.path.exists(directory) else f"has no {INDEX}"
        raise CheckpointError(f"checkpoint {directory} {what}: it is not a checkpoint, or its saving did not "
                              f"finish (the index is written last); save it again")
    try:
        with open(path) as f:
            text = f.read()
    except OSError as exc:
        raise CheckpointError(f"cannot read {path} ({exc.strerror})") from None
    return CheckpointIndex.from_json(text, path)


def check_fits(index: CheckpointIndex, tensors: Sequence[Tensor], layouts: Mapping[str, ArrayLayout],
               directory: str = "the checkpoint") -> None:
    """``CheckpointMismatchError`` naming every tensor that the program and the checkpoint do not both hold
    with the same shape and dtype."""
    problems = []
    for t in tensors:
        lay, entry = layouts[t.argument], index.entry(t.name)
        if entry is None:
            problems.append(f"`{t.name}` ({_spelled(lay.dtype, lay.shape)}): in the program, not in the checkpoint")
        elif tuple(entry.shape) != tuple(lay.shape) or entry.dtype != lay.dtype:
            problems.append(f"`{t.name}`: the checkpoint holds {_spelled(entry.dtype, entry.shape)}, the program "
                            f"{_spelled(lay.dtype, lay.shape)}")
    names = {t.name for t in tensors}
    problems += [f"`{e.name}` ({_spelled(e.dtype, e.shape)}): in the checkpoint, not in the program"
                 for e in index.tensors if e.name not in names]
    if problems:
        raise CheckpointMismatchError(
            f"checkpoint {directory} does not fit the program ({len(problems)} tensor(s) differ):\n  "
            + "\n  ".join(problems) + "\nload a checkpoint saved from the same model, optimizer and dtype")


def read_blocks(directory: str, index: CheckpointIndex, tensors: Sequence[Tensor],
                layouts: Mapping[str, ArrayLayout], rank: int) -> Dict[str, np.ndarray]:
    """``{argument: what rank ``rank`` holds of it}``: its block (an empty array where a distributed layout
    gives it none), the whole array where it holds it whole; an argument it does not hold is left out."""
    out = {}
    for t in tensors:
        lay = layouts[t.argument]
        if lay.blocks[rank] is None:
            if lay.placement == "distributed":
                out[t.argument] = lay.empty(rank)
            continue
        out[t.argument] = index.entry(t.name).read(directory, lay.blocks[rank])
    return out


# -- collective -----------------------------------------------------------------------------------------

def _agree(comm, error: Optional[str], what: str) -> None:
    """Raise ``CheckpointError`` on every rank when any rank had ``error``."""
    errors = [error] if comm is None else comm.allgather(error)
    bad = [(q, e) for q, e in enumerate(errors) if e]
    if bad:
        raise CheckpointError(f"{what} failed on {len(bad)} rank(s): " + "; ".join(f"rank {q}: {e}" for q, e in bad))


def _describe(exc: Exception) -> str:
    return str(exc) if isinstance(exc, CheckpointError) else f"{type(exc).__name__}: {exc}"


def save_checkpoint(directory: str, tensors: Sequence[Tensor], layouts: Mapping[str, ArrayLayout],
                    arrays: Mapping[str, np.ndarray], *, comm=None, program: str = "") -> CheckpointIndex:
    """Collective over ``comm`` (None: one process): every rank writes its blocks of ``tensors`` (``arrays``:
    this rank's values by argument) into ``directory``; rank 0 writes the index once every block exists.
    A checkpoint already in ``directory`` is replaced (its index removed first). Any rank's failure raises
    ``CheckpointError`` on every rank and leaves no index."""
    rank = 0 if comm is None else comm.rank
    index, error = None, None
    if rank == 0:
        try:
            index = index_for(tensors, layouts, program)
            clear_previous(directory)
        except Exception as exc:  # noqa: BLE001 (every rank raises it below)
            error = _describe(exc)
    if comm is not None:
        index, error = comm.bcast((index, error), root=0)
    _agree(None, error, f"saving checkpoint {directory}")
    error = None
    try:
        write_blocks(directory, index, layouts, arrays, rank)
    except Exception as exc:  # noqa: BLE001
        error = _describe(exc)
    _agree(comm, error, f"saving checkpoint {directory}")
    if rank == 0:
        try:
            write_index(directory, index)
        except Exception as exc:  # noqa: BLE001
            error = _describe(exc)
    if comm is not None:
        error = comm.bcast(error, root=0)
    _agree(None, error, f"saving checkpoint {directory}: the index")
    return index


def load_checkpoint(directory: str, tensors: Sequence[Tensor], layouts: Mapping[str, ArrayLayout], *,
                    comm=None) -> Dict[str, np.ndarray]:
    """Collective over ``comm`` (None: one process): this rank's part of every tensor, by argument
    (``read_blocks``). Rank 0 reads the index; a checkpoint that does not fit ``tensors`` raises
    ``CheckpointMismatchError`` on every rank, a missing or unreadable file ``CheckpointError``."""
    rank = 0 if comm is None else comm.rank
    index, error = None, None
    if rank == 0:
        try:
            index = read_index(directory)
        except CheckpointError as exc:
            error = exc
    if comm is not None:
        index, error = comm.bcast((index, error), root=0)
    if error is not None:
        raise CheckpointError(str(error))
    check_fits(index, tensors, layouts, directory)     # the same index and program on every rank: all raise
    out, error = {}, None
    try:
        out = read_blocks(directory, index, tensors, layouts, rank)
    except Exception as exc:  # noqa: BLE001
        error = _describe(exc)
    _agree(comm, error, f"loading checkpoint {directory}")
    return out
