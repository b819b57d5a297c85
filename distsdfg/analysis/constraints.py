"""Communication constraints: the symbolic block of every array each rank reads and writes."""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import dace
import sympy
from dace import subsets, symbolic

from .. import dace_compat as dc
from ..values.exprs import same_value as _same, simplified as _simplified
from ..errors import AccumulationError, IndirectWriteError, ScheduleError, UnsupportedProgramError
from ..dace_compat.source import named
from .kernels import Access, AnalysedMap, Kernel
from .memlets import dim_params as _dim_params
from .tiling import rank_symbol, tile_subset
from ..values.modes import KernelKind

__all__ = ["Box", "ArrayConstraint", "KernelPlan", "kernel_constraints", "box_str", "padded_axes"]

#: Per array dimension ``(start, end)``, both inclusive, symbolic in rank symbols and sizes.
Box = Tuple[Tuple[sympy.Expr, sympy.Expr], ...]


def box_str(array: str, box: Box) -> str:
    def one(s, e):
        stop = sympy.simplify(e + 1)
        return f"{s}:{stop}"
    return f"{array}[{', '.join(one(s, e) for s, e in box)}]"


def _as_box(subset) -> Box:
    if isinstance(subset, subsets.Indices):
        subset = subsets.Range.from_indices(subset)
    return tuple((sympy.sympify(b), sympy.sympify(e)) for b, e, _ in subset.ranges)


def _same_box(a: Box, b: Box) -> bool:
    return len(a) == len(b) and all(_same(x0, y0) and _same(x1, y1) for (x0, x1), (y0, y1) in zip(a, b))


@dataclasses.dataclass
class ArrayConstraint:
    """What one kernel needs of one array, per rank (symbols ``r`` of the kernel's grid)."""
    array: str
    reads: List[Box]                      # one box per reading map; a rank needs their union
    write: Optional[Box]                  # the block it writes (clamped to its iterations)
    alloc_start: Tuple[sympy.Expr, ...]   # global index of the local buffer's first element
    alloc_shape: Tuple[sympy.Expr, ...]   # local buffer shape (the same on every rank)
    write_exact: bool = True              # every element of ``write`` is written
    op: Optional[str] = None              # reduction operator of a conflicting write
    init_covered: bool = True             # a plain write initialises the block before accumulation
    write_covers: bool = False            # the ranks' writes together cover the whole array, exactly
    read_covers: bool = False             # the ranks' read blocks together cover the whole array
    split_reduction: bool = False         # ranks hold partial results (a reduced axis is split)
    write_full: bool = False              # the ranks' write blocks together cover the whole array

    @property
    def is_read(self) -> bool:
        return bool(self.reads)

    @property
    def partial(self) -> bool:
        return self.op is not None


@dataclasses.dataclass
class KernelPlan:
    """A kernel with its resolved grid and per-array constraints."""
    kernel: Kernel
    grid: Tuple[int, ...]
    rank_syms: Tuple
    map_grids: Dict[str, Tuple[int, ...]]
    map_axes: Dict[str, Tuple[Optional[int], ...]]  # per map: param index -> driver grid axis
    arrays: Dict[str, ArrayConstraint]
    # A library node's split axes that it reduces over, as (axis, extent): it runs on whole local
    # buffers, so where the grid does not divide an extent the inputs' padding is filled with
    # ``pad_op``'s identity (the operator its partial results combine with; None: none known).
    even_axes: Tuple[Tuple[int, sympy.Expr], ...] = ()
    pad_op: Optional[str] = None
    padded: Tuple[int, ...] = ()          # of ``even_axes``, those the lowering pads (set by the lowering)

    @property
    def nranks(self) -> int:
        n = 1
        for g in self.grid:
            n *= g
        return n

    def pads(self, c: ArrayConstraint) -> bool:
        """Whether ``c`` is an input whose blocks run along a ``padded`` axis (its buffer needs the fill)."""
        if not self.padded or not c.reads:
            return False
        syms = {self.rank_syms[a] for a in self.padded}
        return any(sympy.sympify(x).free_symbols & syms for box in c.reads for se in box for x in se)

    def tiled_range(self, amap: AnalysedMap, *, clamp=True) -> subsets.Range:
        axes = self.map_axes[amap.info.key]
        grid = [self.grid[a] if a is not None else 1 for a in axes]
        syms = [self.rank_syms[a] if a is not None else None for a in axes]
        return tile_subset(amap.info.ranges, grid, syms, clamp=clamp)


def _by_name(expr) -> sympy.Expr:
    """``expr`` with its symbols told apart by name only: a range ``j:j + 1`` from DaCe's frontend may
    carry two symbol objects named ``j`` (other assumptions) that sympy holds different."""
    expr = sympy.sympify(expr)
    return expr.xreplace({x: symbolic.symbol(x.name) for x in expr.free_symbols if isinstance(x, sympy.Symbol)})


def _exact(memlet: dace.Memlet, params: Sequence[str], conditional: bool = False) -> bool:
    """Whether propagating ``memlet`` over a box of ``params`` gives exactly the elements written
    (``conditional``: would give them, were the write not conditional: a dynamic memlet whose
    index is a permutation of the parameters writes a subset of the box, one element per iteration
    at most)."""
    if memlet.dynamic and not conditional:
        return False
    # A nested SDFG's memlet may cover more than it writes: ``[0:N, 0:H, j, 0:C]`` for a body
    # that writes the row ``i`` of an outer loop only (its volume, ``N*C``, says so). Treating
    # the box as written would gather the block's unwritten rows over the array (lenet).
    if memlet.volume is not None and not _same(memlet.volume, memlet.subset.num_elements()):
        return False
    pset = {symbolic.pystr_to_symbolic(p) for p in params}
    used = set()
    for b, e, s in memlet.subset.ndrange():
        b, e = _by_name(b), _by_name(e)
        if not (b.free_symbols | e.free_symbols) & pset:
            if s != 1:
                return False
            continue
        p = _lone_param(b, e, pset)
        if p is None or p in used:
            return False
        used.add(p)
    return True


def _lone_param(b: sympy.Expr, e: sympy.Expr, pset) -> Optional[sympy.Symbol]:
    """The parameter (of ``pset``) that alone indexes the dimension ``[b, e]``: one index (``b == e``)
    of the form ``p + c`` or ``-p + c``, ``c`` free of parameters. None for anything else."""
    fs = (b.free_symbols | e.free_symbols) & pset
    if len(fs) != 1 or not _same(b, e):
        return None
    p = next(iter(fs))
    coeff = sympy.expand(b).coeff(p)
    if coeff not in (1, -1) or sympy.expand(b - coeff * p).free_symbols & pset:
        return None
    return p


def conditional_write(memlet: dace.Memlet, params: Sequence[str]) -> bool:
    """A write under a condition (a dynamic memlet) at an index that is a permutation of ``params``:
    it writes some elements of its rank's block, and the kernel reads the block first."""
    return memlet.dynamic and memlet.wcr is None and _exact(memlet, params, conditional=True)


def partial_plain_write(memlet: dace.Memlet, params: Sequence[str]) -> bool:
    """A plain write that may leave elements of its box unwritten: under a condition, or a nested
    SDFG's memlet wider than what its body writes (``out[0:N, 0:H, j, 0:C]`` for a body that writes
    the row ``i`` of an outer loop). Split so that the ranks' boxes are disjoint
    (``disjoint_boxes``), each rank reads its block first, and the block it then holds is exact."""
    return memlet.wcr is None and not _exact(memlet, params)


def disjoint_boxes(memlet: dace.Memlet, params: Sequence[str], grid: Sequence[int]) -> bool:
    """Every parameter ``grid`` splits is alone (coefficient 1 or -1, plus a constant) the index of
    one dimension of ``memlet``: the boxes that two ranks' iterations write share no element, so
    a rank's block is its own whatever the body writes inside it. False with no split parameter
    (every rank of a wider kernel grid would write the same box)."""
    pset = {symbolic.pystr_to_symbolic(p) for p in params}
    split = [symbolic.pystr_to_symbolic(p) for p, g in zip(params, grid) if g > 1]
    if not split:
        return False
    lone = {_lone_param(_by_name(b), _by_name(e), pset) for b, e, _ in memlet.subset.ndrange()}
    return all(p in lone for p in split)


def unreduced_params(m: AnalysedMap) -> Dict[str, Tuple[str, dace.Memlet]]:
    """Parameters of ``m`` that must not be split: a plain write (no WCR) does not index them,
    and the ranks would not provably write the same values there (the body uses the parameter
    or reads the array). Per parameter, the array and memlet that forbid it."""
    out: Dict[str, Tuple[str, dace.Memlet]] = {}
    for arr, acc in m.accesses.items():
        for w in acc.writes:
            if w.wcr is not None:
                continue
            indexed = {str(s) for s in w.subset.free_symbols}
            for p in m.info.params:
                if p not in indexed and (acc.reads or p in m.body_symbols):
                    out.setdefault(p, (arr, w))
    return out


def _check_unreduced_writes(m: AnalysedMap, grid: Sequence[int]):
    """A plain write that a split parameter does not index is written by several ranks. That is
    only correct when every rank provably writes the same values: the body does not use the
    parameter and does not read the array. Anything else (an accumulation the rewrite to WCR did
    not recognise) is refused instead of returning one rank's partial values."""
    bad = unreduced_params(m)
    for p, g in zip(m.info.params, grid):
        if g <= 1 or p not in bad:
            continue
        arr, w = bad[p]
        ones = tuple(1 if q == p else h for q, h in zip(m.info.params, grid))
        if dc.accesses_indirectly({arr: Access([], [w])}):
            raise IndirectWriteError(
                f"{named(m.info.key, m.info.source)} writes `{arr}` at indices it reads from data (`{arr}[{w.subset}]` for each "
                f"`{p}`), and the schedule splits `{p}` {g} ways: each rank would write some elements of its own "
                f"copy of `{arr}` and no rank knows which elements the others wrote. Do not split `{p}` (grid "
                f"{ones} for `{m.info.key}`), or accumulate into an array of zeros (`{arr}[idx[{p}]] += v`), "
                f"whose copies the ranks then sum")
        raise AccumulationError(
            f"{named(m.info.key, m.info.source)} writes `{arr}[{w.subset}]`, which does not depend on its parameter `{p}`, and "
            f"the schedule splits `{p}` {g} ways: each rank would hold its own partial `{arr}` and nothing "
            f"combines them. Write the update as a reduction (`{arr}[...] = {arr}[...] + e`, `{arr}[...] += e`, "
            f"`*`, `max({arr}[...], e)` or `min(...)`, outside any other statement that reads `{arr}`), or do not "
            f"split `{p}` (grid {ones} for `{m.info.key}`)")


def _resolve_grids(kernel: Kernel, schedule: Dict[str, Tuple[int, ...]]):
    """Driver grid, and for every map of the kernel its param -> driver-axis map (thesis 4.6)."""
    scheduled = [m for m in kernel.maps if m.info.key in schedule]
    if not scheduled:
        driver = max(kernel.maps, key=lambda m: len(m.info.params))
        grid = (1,) * len(driver.info.params)
    else:
        driver = max(scheduled, key=lambda m: len(m.info.params))
        grid = tuple(schedule[driver.info.key])
    axes = {driver.info.key: tuple(range(len(driver.info.params)))}
    for m in kernel.maps:
        if m is driver:
            continue
        assign: Dict[str, int] = {}
        for arr, acc in m.accesses.items():
            dacc = driver.accesses.get(arr)
            if dacc is None:
                continue
            mm = (acc.writes or acc.reads)[0]
            dm = (dacc.writes or dacc.reads)[0]
            for pm, pd in zip(_dim_params(mm, m.info.params), _dim_params(dm, driver.info.params)):
                if pm is None or pd is None:
                    continue
                a = driver.info.params.index(pd)
                if assign.get(pm, a) != a:
                    raise ScheduleError(f"{named(m.info.key, m.info.source)} parameter `{pm}` indexes data that map "
                                        f"`{driver.info.key}` indexes by two different parameters")
                assign[pm] = a
        axes[m.info.key] = tuple(assign.get(p) for p in m.info.params)
        implied = tuple(grid[a] if a is not None else 1 for a in axes[m.info.key])
        given = schedule.get(m.info.key)
        # A library node's helper map (``reduce_init_map``, ``gemm_init_map``) has one correct grid, the
        # one its main map implies: it takes that grid whatever the schedule gives it.
        if given is not None and tuple(given) != implied and kernel.kind != KernelKind.LIBRARY:
            raise ScheduleError(
                f"inconsistent schedule inside `{kernel.label}`: {named(m.info.key, m.info.source)} has grid {tuple(given)} but "
                f"map `{driver.info.key}` with grid {grid} needs it to be {implied} (both touch the same "
                f"arrays, which must be split the same way); give `{m.info.key}` the grid {implied} or leave it out")
    map_grids = {k: tuple(grid[a] if a is not None else 1 for a in ax) for k, ax in axes.items()}
    return driver, grid, axes, map_grids


class _OpaqueBounds:
    """The non-polynomial parts of tiled bounds (``Min(end, hi)`` of uneven blocks, ``int_ceil(N, P)``
    block sizes, ``Max``, floors) stand as fresh symbols while a kernel's memlets are propagated and
    its boxes compared, and are put back in its constraints.

    DaCe's propagation simplifies every bound it builds; with those functions inside, sympy takes
    0.1-0.6 s per memlet (minutes for a stencil in a loop planned for 32 ranks). Fresh symbols keep
    the bounds polynomial; substituting the functions back gives the same boxes."""

    OPAQUE = (sympy.Min, sympy.Max, sympy.floor, sympy.ceiling)

    def __init__(self):
        self.symbol_of: Dict[sympy.Expr, sympy.Symbol] = {}
        self.back: Dict[sympy.Symbol, sympy.Expr] = {}

    def _opaque(self, e) -> bool:
        return isinstance(e, self.OPAQUE) or isinstance(e, sympy.Function)

    def _hide(self, e):
        e = sympy.sympify(e)
        if self._opaque(e):
            if e not in self.symbol_of:
                sym = dc.sym(f"__dsdfg_opaque{len(self.symbol_of)}")
                self.symbol_of[e], self.back[sym] = sym, e
            return self.symbol_of[e]
        if not e.args or e.is_Atom:
            return e
        args = [self._hide(a) for a in e.args]
        return e if all(a is b for a, b in zip(args, e.args)) else e.func(*args)

    def hide(self, rng: subsets.Range) -> subsets.Range:
        return subsets.Range([(self._hide(b), self._hide(e), s) for b, e, s in rng.ranges])

    def show(self, box: Optional[Box]) -> Optional[Box]:
        if box is None or not self.back:
            return box
        return tuple((sympy.sympify(b).xreplace(self.back), sympy.sympify(e).xreplace(self.back)) for b, e in box)


def _affine_dim(b, e, st, params):
    """``(param, begin offset, end offset)`` when a memlet dimension is ``p + c1 : p + c2`` with
    numbers ``c1 <= c2`` and step 1; ``(None, b, e)`` when it uses no parameter; else None."""
    b, e = sympy.sympify(b), sympy.sympify(e)
    used = (b.free_symbols | e.free_symbols) & params
    if not used:
        return None, b, e
    if len(used) != 1 or sympy.sympify(st) != 1:
        return None
    p = next(iter(used))
    c1, c2 = sympy.expand(b - p), sympy.expand(e - p)
    return (p, c1, c2) if c1.is_Number and c2.is_Number and c1 <= c2 else None


def _affine_box(memlets: Sequence[dace.Memlet], params: Sequence[str], rng: subsets.Range) -> Optional[Box]:
    """``propagate_box`` for memlets that index every dimension by one parameter plus a constant
    (or by no parameter, alike in all of them), on ranges of step 1; None for any other."""
    index = {symbolic.pystr_to_symbolic(p): i for i, p in enumerate(params)}
    psyms = set(index)
    per_memlet = []
    for m in memlets:
        sub = subsets.Range.from_indices(m.subset) if isinstance(m.subset, subsets.Indices) else m.subset
        if not isinstance(sub, subsets.Range):
            return None
        dims = [_affine_dim(b, e, st, psyms) for b, e, st in sub.ranges]
        if any(d is None for d in dims) or (per_memlet and len(dims) != len(per_memlet[0])):
            return None
        per_memlet.append(dims)
    if not per_memlet:
        return None
    box = []
    for per_dim in zip(*per_memlet):
        ps = {d[0] for d in per_dim}
        if len(ps) != 1:
            return None
        p = ps.pop()
        if p is None:
            if any(d[1:] != per_dim[0][1:] for d in per_dim):
                return None
            box.append(per_dim[0][1:])
            continue
        lo, hi, st = (sympy.sympify(x) for x in rng.ranges[index[p]])
        if st != 1:
            return None
        box.append((lo + min(d[1] for d in per_dim), hi + max(d[2] for d in per_dim)))
    return tuple(box)


def propagate_box(memlets: Sequence[dace.Memlet], desc, params: Sequence[str], rng: subsets.Range) -> Box:
    """The bounding box of ``memlets`` over the iteration range ``rng`` of ``params``.

    Memlets whose every dimension is ``p + c`` (a parameter plus a constant, or a constant range
    ``p + c1 : p + c2``) or free of parameters, on ranges of step 1, are propagated here in linear
    time: ``[lo(p) + min c, hi(p) + max c]`` per dimension, which is DaCe's result too. Others go
    through DaCe's memlet propagation (``dace_compat.propagate``), which simplifies every bound with
    sympy (0.05-0.5 s per call)."""
    box = _affine_box(memlets, params, rng)
    return box if box is not None else _as_box(dc.propagate(memlets, desc, params, rng).subset)


def kernel_constraints(kernel: Kernel, schedule: Dict[str, Tuple[int, ...]]) -> KernelPlan:
    """Rank-tile ``kernel`` symbolically and extract its per-array constraints (thesis 4.2, 4.3)."""
    driver, grid, axes, map_grids = _resolve_grids(kernel, schedule)
    rank_syms = tuple(rank_symbol(kernel.index, a) if g > 1 else sympy.Integer(0) for a, g in enumerate(grid))
    plan = KernelPlan(kernel, grid, rank_syms, map_grids, axes, {})

    per_array: Dict[str, dict] = {}
    opaque = _OpaqueBounds()
    for m in kernel.maps:
        _check_unreduced_writes(m, plan.map_grids[m.info.key])
        clamped = opaque.hide(plan.tiled_range(m, clamp=True))
        unclamped = opaque.hide(plan.tiled_range(m, clamp=False))
        for arr, acc in m.accesses.items():
            desc = m.arrays[arr]
            rec = per_array.setdefault(arr, {"reads": [], "writes": [], "alloc": [], "ndim": len(desc.shape),
                                             "shape": tuple(desc.shape), "ops": set(), "exact": [],
                                             "plain_exact": [], "dtype": desc.dtype, "full": set(),
                                             "split": False, "conditional": []})
            for direction, memlets in (("reads", acc.reads), ("writes", acc.writes)):
                if not memlets:
                    continue
                box = propagate_box(memlets, desc, m.info.params, clamped)
                whole = propagate_box(memlets, desc, m.info.params, m.info.ranges)
                if _same_box(whole, tuple((sympy.Integer(0), sympy.sympify(n) - 1) for n in desc.shape)):
                    rec["full"].add(direction)
                rec[direction].append(box)
                rec["alloc"].append(propagate_box(memlets, desc, m.info.params, unclamped))
                if direction == "writes":
                    for w in memlets:
                        if w.wcr is not None:
                            op = dc.reduction_op(w.wcr)
                            if op is None:
                                raise UnsupportedProgramError(
                                    f"{named(m.info.key, m.info.source)} writes `{arr}` with the conflict resolution {w.wcr!r}, "
                                    f"which has no MPI reduction; use +, *, max or min, or schedule the map "
                                    f"with a grid of ones")
                            rec["ops"].add(op)
                            used = set(_dim_params(w, m.info.params))
                            mgrid = plan.map_grids[m.info.key]
                            if any(g > 1 and p not in used for p, g in zip(m.info.params, mgrid)):
                                rec["split"] = True
                        else:
                            single = propagate_box([w], desc, m.info.params, clamped)
                            if _same_box(single, box):
                                if _exact(w, m.info.params):
                                    rec["plain_exact"].append(box)
                                elif (conditional_write(w, m.info.params)       # a plain write, not exact
                                      or disjoint_boxes(w, m.info.params, plan.map_grids[m.info.key])):
                                    rec["conditional"].append(box)
                    rec["exact"].append(any(_exact(w, m.info.params) and w.wcr is None for w in memlets)
                                        or all(w.wcr is not None for w in memlets))

    for arr, rec in per_array.items():
        writes = rec["writes"]
        write = writes[0] if writes else None
        for other in writes[1:]:
            if not _same_box(write, other):
                raise ScheduleError(
                    f"inconsistent schedule inside `{kernel.label}`: its maps write different blocks of "
                    f"`{arr}` ({box_str(arr, write)} vs {box_str(arr, other)}); schedule its maps so that they "
                    f"split `{arr}` the same way")
        if len(rec["ops"]) > 1:
            raise UnsupportedProgramError(f"`{kernel.label}` combines writes to `{arr}` with several operators "
                                          f"{sorted(rec['ops'])}; schedule it with a grid of ones")
        op = next(iter(rec["ops"])) if rec["ops"] else None
        init_covered = op is None or any(_same_box(b, write) for b in rec["plain_exact"])
        if op is not None and not init_covered and rec["plain_exact"]:
            raise UnsupportedProgramError(f"`{kernel.label}` both overwrites part of `{arr}` and accumulates into it")
        exact = op is not None or bool(rec["plain_exact"])
        if (op is None and not exact and rec["conditional"] and len(rec["conditional"]) == len(writes)
                and all(_same_box(b, write) for b in rec["conditional"])):
            # Writes that may leave elements of their box unwritten (under a condition, ``if labels[i]
            # == k: onehot[i, k] = 1.0``, or a nested body's memlet wider than its write), each inside
            # the rank's block (``partial_plain_write``, ``disjoint_boxes``): the kernel reads its block
            # of the current value first, so that the block it holds afterwards is the array's value
            # there, written or not.
            if not any(_same_box(b, write) for b in rec["reads"]):
                rec["reads"].append(write)
            exact = True
        alloc_start, alloc_shape = _alloc(rec["alloc"], rec["shape"], opaque)
        plan.arrays[arr] = ArrayConstraint(arr, [opaque.show(b) for b in rec["reads"]], opaque.show(write), alloc_start, alloc_shape, exact, op, init_covered,
                                           write is not None and exact and init_covered and "writes" in rec["full"],
                                           "reads" in rec["full"], op is not None and rec["split"],
                                           write is not None and "writes" in rec["full"])

    # Library nodes run on whole local blocks: a split reduction axis that the grid does not divide
    # leaves padding in the inputs' buffers, which the lowering fills with the operator's identity.
    if kernel.kind == KernelKind.LIBRARY:
        even = []
        dparams = driver.info.params
        written_axes = set()
        for arr, acc in driver.accesses.items():
            for w in acc.writes:
                for p in _dim_params(w, dparams):
                    if p is not None:
                        written_axes.add(dparams.index(p))
        for a, g in enumerate(grid):
            if g > 1 and a not in written_axes:
                lo, hi, st = driver.info.ranges.ranges[a]
                from .tiling import iterations
                even.append((a, iterations((lo, hi, st))))
        plan.even_axes = tuple(even)
        ops = {c.op for c in plan.arrays.values() if c.split_reduction}
        if even and len(ops) == 1:
            plan.pad_op = next(iter(ops))
    return plan


def padded_axes(kp: KernelPlan, even_checks: List) -> Tuple[int, ...]:
    """The split axes a library kernel reduces over that may not divide evenly: its inputs' local
    buffers get padding there, filled with the identity of the operator that combines the ranks'
    partial results (``kp.pad_op``). Without such an operator an uneven split is refused (before
    compiling when the extent is a number, else when the program is called)."""
    padded = []
    for axis, extent in kp.even_axes:
        main = max(kp.kernel.maps, key=lambda m: len(m.info.params)).info
        key = main.key
        parts = kp.grid[axis]
        ext = sympy.sympify(extent)
        if ext.is_Number and int(ext) % parts == 0:
            continue
        if kp.pad_op is not None:
            padded.append(axis)
        elif ext.is_Number:
            raise ScheduleError(
                f"{named(key, main.source)} axis {axis} (extent {int(ext)}) is split {parts} ways, which does not divide "
                f"{int(ext)}; `{kp.kernel.label}` reduces over this axis as a library node with no operator to "
                f"pad its blocks with: use a grid dimension that divides {int(ext)}")
        else:
            even_checks.append((key, axis, str(ext), parts))
    return tuple(padded)


#: Expressions with more operations than this are not given to ``sympy.simplify``, which can take
#: minutes on the nested Min/Max/int_floor bounds of tiled maps (DaCe's MapTiling).
SIMPLIFY_OPS = 40


def _cheap_simplify(expr):
    """``sympy.simplify(expr)`` where that is cheap; large expressions come back as they are (a
    caller that needs a rank-free size then falls back to the whole array, which is correct)."""
    return _simplified(expr) if sympy.count_ops(expr) <= SIMPLIFY_OPS else expr


def _alloc(boxes: List[Box], shape, opaque: Optional[_OpaqueBounds] = None) -> Tuple[Tuple, Tuple]:
    """Bounding box of the unclamped per-map boxes; its size must not depend on the rank.
    ``opaque``: the boxes' bounds hide functions as symbols (simplified that way, then shown)."""
    ndim = len(shape)
    starts = [sympy.Min(*[b[d][0] for b in boxes]) if len(boxes) > 1 else boxes[0][d][0] for d in range(ndim)]
    ends = [sympy.Max(*[b[d][1] for b in boxes]) if len(boxes) > 1 else boxes[0][d][1] for d in range(ndim)]
    sizes = [_cheap_simplify(e - s + 1) for s, e in zip(starts, ends)]
    if opaque is not None:
        shown = opaque.show(tuple(zip(starts, sizes)))
        starts, sizes = [b for b, _ in shown], [e for _, e in shown]
    rank_free = all(not any(str(x).startswith("__dsdfg_k") for x in sympy.sympify(sz).free_symbols) for sz in sizes)
    if not rank_free:
        return tuple(sympy.Integer(0) for _ in shape), tuple(sympy.sympify(s) for s in shape)
    sizes = [sympy.Min(sz, sympy.sympify(full)) if sympy.sympify(sz - full).is_positive else sz
             for sz, full in zip(sizes, shape)]
    return tuple(starts), tuple(sizes)
