"""Adapter (DaCe 1.0.2): the per-rank symbols of a lowered program passed packed in one array.

A lowered SDFG takes, besides its arrays, one scalar argument per per-rank symbol: the homes'
block origins and shapes (``__dsdfg_h<i>_o<d>`` / ``_s<d>``), the kernels' rank coordinates
and membership flags. A GPT training step has over a thousand of them, and DaCe calls the
compiled program through ctypes, which refuses a call of more than 1,024 arguments.

``pack_symbols`` builds, for compilation only, a wrapper SDFG of the same name around the
lowered one: the wrapper takes the same arrays and size symbols and one ``int64`` array
``PACKED`` instead of the per-rank symbols; its start state's out-edge assigns every symbol from
that array (DaCe interstate assignments ``sym = __dsdfg_syms[k]``), and the next state calls the
lowered SDFG as a nested SDFG, with the symbols mapped in. Inside the nested SDFG the symbols are
free symbols, as before, so DaCe allocates its transients exactly as it did (sized on entry of
the nested call); only the wrapper's state machine changes. ``packed_names`` reads the order
back off a compiled wrapper, and the runtime fills the array from the values it passed before.

Not packed: the size symbols (user arguments), the plan's length, and every symbol a persistent
buffer's shape uses (DaCe sizes those in the wrapper's initialisation, which sees only its own
arguments). Programs with at most ``threshold()`` such symbols are compiled unwrapped.
"""
from __future__ import annotations

import functools
import re
from typing import List, Optional

import dace
from dace import data as dt
from dace import dtypes
from dace.sdfg import SDFG

from ..errors import UnsupportedProgramError

__all__ = ["PACKED", "pack_symbols", "packed_names", "packing", "threshold", "symbols_to_pack"]

#: The wrapper's argument that holds the packed per-rank symbols.
PACKED = "__dsdfg_syms"

#: Default: wrap when a program has more per-rank symbols than this (ctypes' limit is 1,024
#: arguments in all; the call also costs ~1 us per scalar argument).
DEFAULT_THRESHOLD = 256


def threshold() -> int:
    """How many per-rank symbols a program may pass one by one (``$DISTSDFG_PACK_SYMBOLS_ABOVE``)."""
    from ..config import PACK_SYMBOLS_ABOVE
    return int(PACK_SYMBOLS_ABOVE.get() or DEFAULT_THRESHOLD)


def symbols_to_pack(sdfg: SDFG, free=None, keep=()) -> List[str]:
    """The free symbols of the lowered ``sdfg`` that the runtime fills per rank (``__dsdfg*``),
    sorted, less those in ``keep`` and those a persistent buffer's shape uses."""
    free = {str(s) for s in (sdfg.free_symbols if free is None else free)}
    persistent = set()
    for desc in sdfg.arrays.values():
        if desc.transient and desc.lifetime in (dtypes.AllocationLifetime.Persistent,
                                                dtypes.AllocationLifetime.Global):
            persistent |= {str(s) for s in desc.free_symbols}
    return sorted(s for s in free if s.startswith("__dsdfg") and s not in persistent and s not in keep)


def _written(sdfg: SDFG) -> set:
    """The non-transient arrays some state of ``sdfg`` (in loops and branches too) writes; nested
    SDFGs reach them through access nodes of these states."""
    return {n.data for state in sdfg.all_states() for n in state.data_nodes()
            if not sdfg.arrays[n.data].transient and state.in_degree(n) > 0}


def pack_symbols(program: SDFG, keep=(), limit: Optional[int] = None) -> SDFG:
    """``program`` (a copy about to be compiled, which this takes over) itself when it has at most
    ``limit`` (default ``threshold()``) symbols to pack; otherwise the wrapper described above,
    named as ``program`` and with its build folder."""
    limit = threshold() if limit is None else limit
    free = {str(s) for s in program.free_symbols}
    names = symbols_to_pack(program, free, keep)
    args = {n: d for n, d in program.arrays.items() if not d.transient}
    wrapped = len(names) > limit
    _check_arguments(program.name, len(args) + len(free) - (len(names) - 1 if wrapped else 0), len(args))
    if not wrapped:
        return program
    outer = SDFG(program.name)
    outer.build_folder = program.build_folder
    for s in sorted(free):
        outer.add_symbol(s, program.symbols[s])
    for n, d in args.items():
        outer.add_datadesc(n, d.clone())
    outer.add_array(PACKED, [len(names)], dace.int64)
    # Every argument is an input (also those only written: a pointer is passed either way, and
    # every non-transient array of the nested SDFG is connected); those written are outputs too.
    ins = set(args)
    outs = set(args) & _written(program)
    program.name = f"{program.name}_packed"
    unpack = outer.add_state("unpack_rank_symbols", is_start_block=True)
    body = outer.add_state_after(unpack, "program", assignments={s: f"{PACKED}[{k}]" for k, s in enumerate(names)})
    node = body.add_nested_sdfg(program, outer, ins, outs, symbol_mapping={s: s for s in sorted(free)})
    for n in sorted(ins):
        body.add_edge(body.add_read(n), None, node, n, dace.Memlet.from_array(n, outer.arrays[n]))
    for n in sorted(outs):
        body.add_edge(node, n, body.add_write(n), None, dace.Memlet.from_array(n, outer.arrays[n]))
    return outer


#: ctypes refuses a call with more arguments than this.
CTYPES_LIMIT = 1024


def _check_arguments(name: str, count: int, arrays: int) -> None:
    """Refuse, before the C++ compile, a program whose call would pass more than ctypes takes."""
    if count > CTYPES_LIMIT:
        raise UnsupportedProgramError(
            f"program {name!r} would be called with {count} arguments ({arrays} arrays, "
            f"{count - arrays} symbols), more than ctypes' {CTYPES_LIMIT}: pass fewer arrays "
            f"(e.g. stack parameters into one array) or lower $DISTSDFG_PACK_SYMBOLS_ABOVE "
            f"(now {threshold()}) so that more per-rank symbols are packed")


def packing(sdfg: SDFG, keep=()):
    """What ``dace_compat.build.generate_code`` wraps a lowered CPU program with (``pack_symbols``,
    keeping the symbols ``keep`` as arguments); None for other programs (GPU: not wrapped)."""
    if getattr(getattr(sdfg, "_distsdfg", None), "target", None) != "cpu":
        return None
    return functools.partial(pack_symbols, keep=tuple(keep))


_ASSIGNED = re.compile(rf"^{re.escape(PACKED)}\[(\d+)\]$")


def packed_names(sdfg: SDFG) -> Optional[List[str]]:
    """The symbols a compiled wrapper reads from ``PACKED``, in order; None for an unwrapped program."""
    if PACKED not in sdfg.arrays or isinstance(sdfg.arrays[PACKED], dt.Scalar):
        return None
    start = sdfg.start_block
    found = {}
    for e in sdfg.out_edges(start):
        for s, value in e.data.assignments.items():
            m = _ASSIGNED.match(str(value).replace(" ", ""))
            if m:
                found[int(m.group(1))] = s
    return [found[k] for k in range(len(found))]
