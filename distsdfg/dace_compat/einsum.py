"""Adapter (DaCe 1.0.2): contractions left as accumulating maps become one BLAS matrix product.

DaCe's NumPy frontend gives an einsum a (batched) matrix product only when each operand's batch,
row and contraction indices are consecutive dimensions in the right order; any other einsum of two
operands (``'bik,khj->bhij'``, ``'bhse,hej->bsj'``: the attention projections) becomes one map
over every index whose tasklet adds ``a * b`` into the output (a sum write-conflict resolution),
after a map that resets the output. That loop nest runs at a few percent of BLAS speed. JAX and
``opt_einsum`` instead permute the operands into matrices and call one GEMM.

``contraction_of`` reads such a top-level map as a ``Contraction`` (which map parameters are
batch, row, column and contraction indices of which operand). ``to_matrix_product`` replaces it,
in the same state, by

1. for each operand whose block is not already a row-major ``[batch, rows, contraction]`` (left)
   or ``[batch, contraction, columns]`` (right) matrix: a map copying the block into a transient in
   that order (tiled later as any transposing copy);
2. DaCe's ``MatMul`` on reshape views of the two matrices into a fresh ``[batch, rows, columns]``
   transient (``BatchedMatMul`` with a batch: BLAS through the MKL expansion);
3. a map adding that transient into the output block (the original accumulation, without its
   contraction index, so without atomics).

The output is still accumulated into, so whatever initialised it (the reset map, a fill step of
the lowering, a partial result that another rank adds to) keeps its meaning; every memlet outside
the replaced map is unchanged, so are the communication steps and their buffers. Ordering edges
(empty memlets) into and out of the map go to the adding map.
"""
from __future__ import annotations

import ast
import copy
import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import sympy
from dace import data as dt
from dace import dtypes
from dace import memlet as mm
from dace import subsets, symbolic
from dace.sdfg import SDFG, SDFGState, nodes

from ..geometry.boxes import row_major_strides
from .tiling import bound_expr, bound_names

__all__ = ["Contraction", "contraction_of", "to_matrix_product", "BATCHED_LOCALS"]

#: C++ locals of DaCe 1.0.2's MKL batched GEMM (``blas.BATCHED_LOCALS``): no batched product is
#: made in a program with a size symbol of one of these names.
BATCHED_LOCALS = ("A", "B", "C")

_FLOATS = (dtypes.float32, dtypes.float64)
_CPU = (dtypes.ScheduleType.Default, dtypes.ScheduleType.CPU_Multicore, dtypes.ScheduleType.Sequential)


def _zero(x) -> bool:
    try:
        return sympy.simplify(bound_expr(x)) == 0
    except (TypeError, ValueError):
        return False


@dataclasses.dataclass
class Operand:
    """One array of the contraction: its outer access node, the memlet inside the map (one element
    per dimension) and the map parameter each dimension is indexed by (None: a constant index)."""
    node: nodes.AccessNode
    memlet: mm.Memlet
    params: Tuple[Optional[str], ...]

    @property
    def data(self) -> str:
        return self.node.data


@dataclasses.dataclass
class Contraction:
    """``c[...] += a[...] * b[...]`` over a map: ``batch`` parameters index all three arrays, ``rows``
    a and c, ``cols`` b and c, ``inner`` (the contraction) a and b. ``ranges``: parameter -> (first,
    last) of the map."""
    entry: nodes.MapEntry
    a: Operand
    b: Operand
    c: Operand
    ranges: Dict[str, Tuple]
    batch: List[str]
    rows: List[str]
    cols: List[str]
    inner: List[str]

    def extent(self, p: str):
        first, last = self.ranges[p]
        return sympy.simplify(bound_expr(last) - bound_expr(first) + 1)

    def size(self, params: Sequence[str]):
        out = sympy.Integer(1)
        for p in params:
            out = out * self.extent(p)
        return out

    def multiply_adds(self):
        """Products the map computes (a number, or an expression of the sizes)."""
        return self.size(self.batch + self.rows + self.cols + self.inner)


def _dim_params(memlet: mm.Memlet, params: Sequence[str]) -> Optional[Tuple[Optional[str], ...]]:
    """The parameter indexing each dimension of a one-element memlet as ``p + offset`` (offset free of
    parameters), None for a constant index; None overall for anything else."""
    if memlet.data is None or not isinstance(memlet.subset, subsets.Range):
        return None
    out: List[Optional[str]] = []
    for b, e, s in memlet.subset.ranges:
        if not _zero(bound_expr(b) - bound_expr(e)):
            return None
        used = [p for p in params if p in bound_names(b)]
        if not used:
            out.append(None)
            continue
        if len(used) != 1:
            return None
        rest = bound_expr(b) - symbolic.pystr_to_symbolic(used[0])
        if bound_names(rest) & set(params):
            return None
        out.append(used[0])
    named = [p for p in out if p is not None]
    return tuple(out) if len(named) == len(set(named)) else None


def _product_operands(tasklet: nodes.Tasklet, ins: Sequence[str], out: str) -> Optional[List[str]]:
    """``[x, y]`` when the tasklet's code is ``out = x * y`` with ``x``, ``y`` its two input connectors."""
    if tasklet.language != dtypes.Language.Python:
        return None
    try:
        body = ast.parse(tasklet.code.as_string).body
    except SyntaxError:
        return None
    if len(body) != 1 or not isinstance(body[0], ast.Assign) or len(body[0].targets) != 1:
        return None
    target, value = body[0].targets[0], body[0].value
    if not (isinstance(target, ast.Name) and target.id == out):
        return None
    if not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult)):
        return None
    names = [o.id if isinstance(o, ast.Name) else None for o in (value.left, value.right)]
    return names if sorted(map(str, names)) == sorted(ins) else None


def contraction_of(sdfg: SDFG, state: SDFGState, entry: nodes.MapEntry) -> Optional[Contraction]:
    """The contraction a top-level map computes, or None when it is not ``c[...] += a[...] * b[...]``
    with every parameter indexing exactly two or three of the arrays (one dimension each), a
    contraction, rows and columns, float32 or float64 arrays of one type, and map bounds that do not
    depend on other parameters or on values set while the program runs."""
    from . import reduction_op, runtime_defined_symbols
    params = list(entry.map.params)
    exit_ = state.exit_node(entry)
    if entry.map.schedule not in _CPU or any(not e.data.is_empty() and not str(e.dst_conn).startswith("IN_")
                                             for e in state.in_edges(entry)):
        return None         # a GPU map, or a range read from data (a dynamic map input)
    body = state.scope_subgraph(entry, include_entry=False, include_exit=False).nodes()
    if len(body) != 1 or not isinstance(body[0], nodes.Tasklet):
        return None
    tasklet = body[0]
    t_in = [e for e in state.in_edges(tasklet)]
    t_out = [e for e in state.out_edges(tasklet)]
    if len(t_in) != 2 or len(t_out) != 1 or any(e.data.is_empty() for e in t_in + t_out):
        return None
    if any(not e.data.is_empty() for e in state.out_edges(exit_) if e.data.wcr is None) \
            or len([e for e in state.out_edges(exit_) if not e.data.is_empty()]) != 1:
        return None
    out = t_out[0]
    order = _product_operands(tasklet, [e.dst_conn for e in t_in], out.src_conn)
    if reduction_op(out.data.wcr) != "sum" or order is None:
        return None
    t_in.sort(key=lambda e: order.index(e.dst_conn))        # a is the product's left factor
    ops = []
    for e in t_in + [out]:
        dims = _dim_params(e.data, params)
        path = state.memlet_path(e)
        end = path[0].src if e in t_in else path[-1].dst
        if dims is None or not isinstance(end, nodes.AccessNode) or len(path) != 2:
            return None
        ops.append(Operand(end, e.data, dims))
    a, b, c = ops
    if c.data in (a.data, b.data):
        return None
    if len({sdfg.arrays[o.data].dtype for o in ops}) != 1 or sdfg.arrays[c.data].dtype not in _FLOATS:
        return None
    late = runtime_defined_symbols(sdfg)
    ranges = {}
    for p, (first, last, step) in zip(params, entry.map.range.ranges):
        if not _zero(bound_expr(step) - 1) or (bound_names(first) | bound_names(last)) & (set(params) | late):
            return None
        ranges[p] = (first, last)
    groups = {"batch": [], "rows": [], "cols": [], "inner": []}
    where = {p: (p in a.params, p in b.params, p in c.params) for p in params}
    for p in params:       # in the map's order for now; to_matrix_product picks the layout
        kind = {(True, True, True): "batch", (True, False, True): "rows", (False, True, True): "cols",
                (True, True, False): "inner"}.get(where[p])
        if kind is None:
            return None     # a parameter of one array only (a sum over it, or a broadcast)
        groups[kind].append(p)
    if not groups["rows"] or not groups["cols"] or not groups["inner"]:
        return None
    return Contraction(entry, a, b, c, ranges, **groups)


# -- the layout: which operand is left, and the order of each index group --------------------------------
def _in_order(op: Operand, group: Sequence[str]) -> List[str]:
    return [p for p in op.params if p in group]


def _viewable(sdfg: SDFG, con: Contraction, op: Operand, order: Sequence[str]) -> bool:
    """Whether ``op``'s block is already the row-major matrix ``order`` (its dimensions indexed by
    ``order``'s parameters in turn, every dimension but the first covered whole)."""
    desc = sdfg.arrays[op.data]
    if type(desc) is not dt.Array or list(op.params) != list(order):
        return False
    if not all(_zero(bound_expr(s) - bound_expr(r)) for s, r in zip(desc.strides, row_major_strides(list(desc.shape)))):
        return False
    return all(_zero(con.extent(p) - bound_expr(n)) for p, n in zip(list(order)[1:], list(desc.shape)[1:]))


@dataclasses.dataclass
class Layout:
    left: Operand
    right: Operand
    batch: List[str]
    rows: List[str]      # in the left operand and the output
    cols: List[str]      # in the right operand and the output
    inner: List[str]
    copy_left: bool
    copy_right: bool

    @property
    def out_order(self) -> List[str]:
        return self.batch + self.rows + self.cols


def choose_layout(sdfg: SDFG, con: Contraction) -> Layout:
    """The product's operand order and index orders that copy the fewest operands, then the one whose
    result is laid out as the output is (an adding map without a transpose)."""
    best = None
    out_params = [p for p in con.c.params if p is not None]
    for left, right, rows, cols in ((con.a, con.b, con.rows, con.cols), (con.b, con.a, con.cols, con.rows)):
        batch = _in_order(con.c, con.batch)
        for r in {tuple(_in_order(con.c, rows)), tuple(_in_order(left, rows))}:
            for c in {tuple(_in_order(con.c, cols)), tuple(_in_order(right, cols))}:
                for k in {tuple(_in_order(left, con.inner)), tuple(_in_order(right, con.inner))}:
                    lay = Layout(left, right, batch, list(r), list(c), list(k),
                                 not _viewable(sdfg, con, left, batch + list(r) + list(k)),
                                 not _viewable(sdfg, con, right, batch + list(k) + list(c)))
                    score = (lay.copy_left + lay.copy_right, lay.out_order != out_params,
                             left is not con.a, r != tuple(_in_order(con.c, rows)))
                    if best is None or score < best[0]:
                        best = (score, lay)
    return best[1]


def matrix_shapes(con: Contraction, lay: Layout):
    """Shapes of the product's left, right and result matrices ([batch,] rows, cols)."""
    b = [con.size(lay.batch)] if lay.batch else []
    rows, cols, inner = con.size(lay.rows), con.size(lay.cols), con.size(lay.inner)
    return b + [rows, inner], b + [inner, cols], b + [rows, cols]


# -- the rewrite ------------------------------------------------------------------------------------------
def _range(con: Contraction, p: str) -> str:
    first, last = con.ranges[p]
    return f"{first}:{last} + 1"


def _block(con: Contraction, op: Operand) -> subsets.Range:
    """The box of ``op`` the map reads or writes."""
    out = []
    for (b, _, _), p in zip(op.memlet.subset.ranges, op.params):
        if p is None:
            out.append((b, b, 1))
            continue
        first, last = con.ranges[p]
        sp = symbolic.pystr_to_symbolic(p)
        out.append((bound_expr(b).subs(sp, bound_expr(first)), bound_expr(b).subs(sp, bound_expr(last)), 1))
    return subsets.Range(out)


def _local(con: Contraction, params: Sequence[str]) -> str:
    return ", ".join(f"{p} - ({con.ranges[p][0]})" for p in params)


def _view(sdfg: SDFG, state: SDFGState, source: nodes.AccessNode, box: subsets.Range, shape, dtype,
          read: bool) -> nodes.AccessNode:
    """A row-major view of shape ``shape`` on ``box`` of ``source``'s array (read: source -> view,
    else view -> source)."""
    name, _ = sdfg.add_view(f"{source.data}_mat", shape, dtype, strides=row_major_strides(list(shape)),
                            find_new_name=True)
    vnode = state.add_access(name)
    full = ", ".join(f"0:{n}" for n in shape)
    m = mm.Memlet(data=source.data, subset=box, other_subset=subsets.Range.from_string(full))
    if read:
        state.add_edge(source, None, vnode, "views", m)
    else:
        state.add_edge(vnode, "views", source, None, m)
    return vnode


def _operand_matrix(sdfg: SDFG, state: SDFGState, con: Contraction, op: Operand, order: List[str], permute: bool,
                    shape, label: str) -> nodes.AccessNode:
    dtype = sdfg.arrays[op.data].dtype
    if not permute:
        return _view(sdfg, state, op.node, _block(con, op), shape, dtype, read=True)
    tshape = [con.extent(p) for p in order]
    tname, _ = sdfg.add_transient(f"{op.data}_perm", tshape, dtype, find_new_name=True)
    tnode = state.add_access(tname)
    state.add_mapped_tasklet(
        f"{label}_{op.data}_perm", {p: _range(con, p) for p in order},
        {"__in": mm.Memlet(data=op.data, subset=copy.deepcopy(op.memlet.subset))}, "__out = __in",
        {"__out": mm.Memlet(f"{tname}[{_local(con, order)}]")},
        input_nodes={op.data: op.node}, output_nodes={tname: tnode}, external_edges=True)
    full = subsets.Range.from_string(", ".join(f"0:{n}" for n in tshape))
    return _view(sdfg, state, tnode, full, shape, dtype, read=True)


def to_matrix_product(sdfg: SDFG, state: SDFGState, con: Contraction, lay: Optional[Layout] = None) -> Layout:
    """Replace the contraction's map as described in the module docstring; returns the layout used."""
    import dace.libraries.blas as blas
    lay = lay or choose_layout(sdfg, con)
    label = con.entry.map.label
    exit_ = state.exit_node(con.entry)
    before = [e.src for e in state.in_edges(con.entry) if e.data.is_empty()]
    after = [e.dst for e in state.out_edges(exit_) if e.data.is_empty()]
    for n in state.scope_subgraph(con.entry).nodes():
        state.remove_node(n)

    sl, sr, sc = matrix_shapes(con, lay)
    left = _operand_matrix(sdfg, state, con, lay.left, lay.batch + lay.rows + lay.inner, lay.copy_left, sl, label)
    right = _operand_matrix(sdfg, state, con, lay.right, lay.batch + lay.inner + lay.cols, lay.copy_right, sr, label)
    dtype = sdfg.arrays[con.c.data].dtype
    order = lay.out_order
    pshape = [con.extent(p) for p in order]
    pname, _ = sdfg.add_transient(f"{con.c.data}_product", pshape, dtype, find_new_name=True)
    pnode = state.add_access(pname)
    result = _view(sdfg, state, pnode, subsets.Range.from_string(", ".join(f"0:{n}" for n in pshape)), sc, dtype,
                   read=False)
    gemm = blas.MatMul(f"{label}_gemm")
    state.add_node(gemm)
    full = lambda shape: ", ".join(f"0:{n}" for n in shape)     # noqa: E731
    state.add_edge(left, None, gemm, "_a", mm.Memlet(f"{left.data}[{full(sl)}]"))
    state.add_edge(right, None, gemm, "_b", mm.Memlet(f"{right.data}[{full(sr)}]"))
    state.add_edge(gemm, "_c", result, None, mm.Memlet(f"{result.data}[{full(sc)}]"))

    out_params = [p for p in con.c.params if p is not None]
    add = mm.Memlet(data=con.c.data, subset=copy.deepcopy(con.c.memlet.subset), wcr="lambda a, b: a + b")
    add.wcr_nonatomic = True        # every iteration adds into its own element
    _, entry, exit2 = state.add_mapped_tasklet(
        f"{label}_add", {p: _range(con, p) for p in out_params},
        {"__in": mm.Memlet(f"{pname}[{_local(con, order)}]")}, "__out = __in", {"__out": add},
        input_nodes={pname: pnode}, output_nodes={con.c.data: con.c.node}, external_edges=True)
    for src in before:
        state.add_nedge(src, entry, mm.Memlet())
    for dst in after:
        state.add_nedge(exit2, dst, mm.Memlet())
    return lay
