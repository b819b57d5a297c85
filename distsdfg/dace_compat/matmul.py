"""Adapter (DaCe 1.0.2): matrix products whose rank-local operands DaCe reads as vectors.

DaCe's ``MatMul`` expansion drops the size-1 dimensions of its operands' subsets before it
picks GEMM, GEMV, a dot product or a batched product. After rank tiling a block can have extent
1 where the program's array had more: a contraction axis split so that each rank holds one
index makes ``(M, 1) @ (1, N)`` (an outer product), which DaCe takes for a dot product ("Output
of dot product must be a single element"); a batch block of one leaves ``[3, 3, 7] x [3, 7]``, for
which it has no expansion; a matrix-vector product whose contraction block has extent 1,
``(M, 1) @ (1,)``, squeezes the vector to a scalar ("Output of dot product must be a single
element"). Such programs are valid schedules: they failed only at compile time.

``degenerate_matmuls_to_maps`` replaces every ``MatMul`` node that DaCe would misread by two maps on the
operands' real shapes: one that zeroes the output block, then one over output and contraction
indices that accumulates the products (a sum write-conflict resolution). Products that DaCe
reads correctly (the squeezed shapes still mean the same product: row vector times matrix,
matrix times column vector, a dot product into one element) stay library nodes, and so BLAS calls.

DaCe's ``Transpose`` node squeezes its memlets the same way and then refuses a block with a
dimension of one ("Transpose operation only supported on matrices"): ``A.T @ y`` with ``A`` of
``(2, 3)`` and its rows split two ways gives each rank a ``(1, 3)`` block, a valid schedule that
failed validation. ``degenerate_transposes_to_maps`` makes such a node a copy map
``out[j, i] = inp[i, j]`` over the block.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

from dace import memlet as mm
from dace import subsets
from dace.sdfg import SDFG, nodes

from . import all_states

__all__ = ["degenerate_matmuls_to_maps", "degenerate_transposes_to_maps", "misread_by_dace", "vector_product"]


def _is_one(d) -> bool:
    try:
        return int(d) == 1
    except (TypeError, ValueError):
        return False


def _rank(size: Sequence) -> int:
    return max(1, sum(1 for d in size if not _is_one(d)))


def _same(a, b) -> bool:
    try:
        return int(a) == int(b)
    except (TypeError, ValueError):
        import sympy
        return sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0


def is_matrix_product(sa: Sequence, sb: Sequence, sc: Sequence) -> bool:
    """Whether subsets of sizes ``sa``, ``sb`` and ``sc`` are, dimension for dimension, the operands and
    result of a (batched) matrix product ``(..., M, K) @ (..., K, N) -> (..., M, N)``. A subset with
    an index dimension (``d[0:N, i]``: a vector taken out of a matrix) usually is not; DaCe squeezes
    those away, which is right for them."""
    if len(sa) < 2 or len(sb) < 2 or len(sc) != max(len(sa), len(sb)):
        return False
    (m, k), (k2, n), (mc, nc) = sa[-2:], sb[-2:], sc[-2:]
    if not (_same(k, k2) and _same(m, mc) and _same(n, nc)):
        return False
    return all(_same(x, y) for s in (sa, sb) for x, y in zip(s[:-2], sc[len(sc) - len(s):-2]))


def vector_product(sa: Sequence, sb: Sequence, sc: Sequence) -> Optional[str]:
    """``"mv"`` when subsets of sizes ``sa``, ``sb``, ``sc`` are a matrix times a vector
    (``(M, K) @ (K,) -> (M,)``), ``"vm"`` for a vector times a matrix (``(K,) @ (K, N) -> (N,)``),
    else None."""
    if len(sa) == 2 and len(sb) == 1 and len(sc) == 1 and _same(sa[1], sb[0]) and _same(sa[0], sc[0]):
        return "mv"
    if len(sa) == 1 and len(sb) == 2 and len(sc) == 1 and _same(sa[0], sb[0]) and _same(sb[1], sc[0]):
        return "vm"
    return None


def misread_by_dace(sa: Sequence, sb: Sequence, sc: Sequence) -> bool:
    """Whether DaCe 1.0.2's MatMul expansion, which squeezes out size-1 dimensions, would compute
    something other than the matrix product of operands of sizes ``sa`` and ``sb`` (output ``sc``),
    or fail to expand it. Only products whose subsets are a matrix product dimension for dimension
    (``is_matrix_product``) qualify: in ``d[0:N, i] @ B`` the size-1 dimension is an index, and
    DaCe's reading (a vector times a matrix) is the program's."""
    kind = vector_product(sa, sb, sc)
    if kind is not None:        # a contraction of extent 1 squeezes the vector to a scalar: no GEMV
        return _is_one(sa[-1])
    if not is_matrix_product(sa, sb, sc):
        return False
    if (_rank(sa), _rank(sb)) == (len(sa), len(sb)):
        return False                                    # nothing squeezed away
    if len(sa) == 2 and len(sb) == 2:
        (m, k), (_, n) = sa, sb
        one_m, one_k, one_n = _is_one(m), _is_one(k), _is_one(n)
        if one_m and not one_k and not one_n:           # (1, K) @ (K, N): GEMV with A transposed
            return False
        if one_n and not one_k and not one_m:           # (M, K) @ (K, 1): GEMV
            return False
        if one_m and one_n:                             # (1, K) @ (K, 1): one element (a dot product)
            return False
        return True
    return True                                         # batched products with a squeezed dimension


def _edges(state, node):
    ins = {e.dst_conn: e for e in state.in_edges(node)}
    outs = {e.src_conn: e for e in state.out_edges(node)}
    return ins.get("_a"), ins.get("_b"), outs.get("_c"), ins


def _index(rng: subsets.Range, params: Sequence[Optional[str]]) -> subsets.Range:
    """Element ``params`` (None: the dimension's only index) of the box ``rng``."""
    out = []
    for (b, _, _), p in zip(rng.ranges, params):
        e = b if p is None else b + _sym(p)
        out.append((e, e, 1))
    return subsets.Range(out)


def _sym(name: str):
    import dace
    return dace.symbolic.pystr_to_symbolic(name)


def _replace(sdfg: SDFG, state, node, ea, eb, ec) -> None:
    ra, rb, rc = ea.data.subset, eb.data.subset, ec.data.subset
    sa, sb, sc = ra.size(), rb.size(), rc.size()
    i, j, k = "__mm_i", "__mm_j", "__mm_k"
    kind = vector_product(sa, sb, sc)
    if kind is not None:        # (M, K) @ (K,) or (K,) @ (K, N)
        a_params: List[Optional[str]] = [i, k] if kind == "mv" else [k]
        b_params: List[Optional[str]] = [k] if kind == "mv" else [k, j]
        c_params = [i] if kind == "mv" else [j]
    else:
        nbatch = len(sc) - 2
        bparams = [f"__mm_b{i}" for i in range(nbatch)]
        a_params = bparams[len(bparams) - (len(sa) - 2):] + [i, k] if len(sa) > 2 else [i, k]
        b_params = bparams[len(bparams) - (len(sb) - 2):] + [k, j] if len(sb) > 2 else [k, j]
        c_params = bparams + [i, j]
    out_ranges = {p: f"0:{n}" for p, n in zip(c_params, sc)}
    src_a, src_b, dst_c = ea.src, eb.src, ec.dst
    state.remove_node(node)
    zero = state.add_access(dst_c.data)
    state.add_mapped_tasklet(
        f"{node.label}_zero", out_ranges, {}, "__z = 0",
        {"__z": mm.Memlet(data=dst_c.data, subset=_index(rc, c_params))}, output_nodes={dst_c.data: zero},
        external_edges=True)
    _, entry, _ = state.add_mapped_tasklet(
        f"{node.label}_products", {**out_ranges, k: f"0:{sa[-1]}"},
        {"__x": mm.Memlet(data=ea.data.data, subset=_index(ra, a_params)),
         "__y": mm.Memlet(data=eb.data.data, subset=_index(rb, b_params))},
        "__z = __x * __y",
        {"__z": mm.Memlet(data=dst_c.data, subset=_index(rc, c_params), wcr="lambda p, q: p + q")},
        input_nodes={ea.data.data: src_a, eb.data.data: src_b}, output_nodes={dst_c.data: dst_c},
        external_edges=True)
    state.add_nedge(zero, entry, mm.Memlet())             # zero the block first


def degenerate_matmuls_to_maps(sdfg: SDFG) -> int:
    """Replace the MatMul nodes DaCe would misread (``misread_by_dace``); returns how many."""
    done = 0
    for state in all_states(sdfg):
        for node in list(state.nodes()):
            if not isinstance(node, nodes.LibraryNode) or type(node).__name__ != "MatMul":
                continue
            ea, eb, ec, ins = _edges(state, node)
            if ea is None or eb is None or ec is None or "_cin" in ins or ec.data.wcr is not None:
                continue
            if not all(isinstance(e.data.subset, subsets.Range) for e in (ea, eb, ec)):
                continue
            if not isinstance(ea.src, nodes.AccessNode) or not isinstance(eb.src, nodes.AccessNode) \
                    or not isinstance(ec.dst, nodes.AccessNode):
                continue
            if getattr(node, "alpha", 1) != 1 or getattr(node, "beta", 0) != 0:
                continue
            sa, sb, sc = ea.data.subset.size(), eb.data.subset.size(), ec.data.subset.size()
            if not misread_by_dace(sa, sb, sc):
                continue

            _replace(sdfg, state, node, ea, eb, ec)
            done += 1
    return done


def degenerate_transposes_to_maps(sdfg: SDFG) -> int:
    """Replace the ``Transpose`` nodes of a 2-D block with a dimension of one (which DaCe's node
    refuses once it squeezes the block) by a copy map; returns how many."""
    done = 0
    for state in all_states(sdfg):
        for node in list(state.nodes()):
            if not isinstance(node, nodes.LibraryNode) or type(node).__name__ != "Transpose":
                continue
            ins = [e for e in state.in_edges(node) if e.dst_conn == "_inp"]
            outs = [e for e in state.out_edges(node) if e.src_conn == "_out"]
            if len(ins) != 1 or len(outs) != 1 or outs[0].data.wcr is not None:
                continue
            ei, eo = ins[0], outs[0]
            if not all(isinstance(e.data.subset, subsets.Range) and len(e.data.subset) == 2 for e in (ei, eo)) \
                    or not isinstance(ei.src, nodes.AccessNode) or not isinstance(eo.dst, nodes.AccessNode):
                continue
            si = ei.data.subset.size()
            if not any(_is_one(d) for d in si):
                continue
            i, j = "__tr_i", "__tr_j"
            state.remove_node(node)
            state.add_mapped_tasklet(
                f"{node.label}_copy", {i: f"0:{si[0]}", j: f"0:{si[1]}"},
                {"__x": mm.Memlet(data=ei.data.data, subset=_index(ei.data.subset, [i, j]))}, "__y = __x",
                {"__y": mm.Memlet(data=eo.data.data, subset=_index(eo.data.subset, [j, i]))},
                input_nodes={ei.data.data: ei.src}, output_nodes={eo.data.data: eo.dst}, external_edges=True)
            done += 1
    return done
