"""DaCe 1.0.2 code-generation fix (part of the ``dace_compat`` layer): a tasklet's multi-dimensional
access to a connector takes one index per dimension of the connector.

A tasklet that reads a plane (``_w << a[i0, 0:4, 0:4]``) gets a connector with the memlet's dims of
extent above one, and indexes it ``_w[p, q]``. ``DaCeKeywordRemover._subscript_expr`` turns that into
``p * s0 + q * s1`` with the strides of those dims, but first drops the indices at the positions where
the *array's* shape is one (``desc.shape[i]``, counting the connector's indices against the array's
leading dims): with a one-channel array ``(N, 1, H, W)`` read as ``a[i0, i1, 0:H, 0:W]`` the tasklet's
``_w[p, q]`` loses ``q`` and the build fails ("Invalid number of dimensions in expression (expected 2,
got 1)"); a batch block of one row on some rank does the same to a kernel that built elsewhere.

Inside ``distsdfg.numpy_semantics()`` (``semantics.py``) ``install`` wraps ``_subscript_expr``: where the
access has exactly one index per stride DaCe keeps for the connector, it is used as it is; every other
access goes to DaCe's method unchanged, so the fix only turns such a refusal into the access the
tasklet wrote. ``DISTSDFG_TASKLET_INDEX=0`` turns it off.
"""
from __future__ import annotations

import ast
import copy

__all__ = ["install"]

def _connector_strides(self, target: str):
    """The strides DaCe gives ``target``'s indices (its own computation), or ``None`` for a constant."""
    from dace import data, dtypes
    if target in self.constants or target not in self.memlets:
        return None
    memlet, _, _, dtype = self.memlets[target]
    strides = memlet.subset.absolute_strides(self.sdfg.arrays[memlet.data].strides)
    dimlen = dtype.veclen if isinstance(dtype, dtypes.vector) else 1
    size = memlet.subset.size()
    if not isinstance(dtype, dtypes.pointer) or data._prod(size) != 1:
        strides = [s for i, s in enumerate(strides) if size[i] != 1 and not (s == 1 and size[i] == dimlen)]
    return strides


def install(patches) -> None:
    """Wrap ``_subscript_expr`` for a ``numpy_semantics()`` block (``semantics.py``);
    ``DISTSDFG_TASKLET_INDEX=0`` leaves DaCe as it is."""
    from ..config import TASKLET_INDEX
    if not TASKLET_INDEX.get():
        return
    from dace import symbolic
    from dace.codegen.targets.cpp import DaCeKeywordRemover
    from dace.frontend.python.astutils import unparse
    original = DaCeKeywordRemover._subscript_expr

    def _subscript_expr(self, slicenode, target):
        index = self.visit(copy.deepcopy(slicenode))
        index = index.value if isinstance(index, ast.Index) else index
        strides = _connector_strides(self, target) if isinstance(index, ast.Tuple) else None
        if strides is not None and len(strides) == len(index.elts) > 1:
            return sum(symbolic.pystr_to_symbolic(unparse(e)) * s for e, s in zip(index.elts, strides))
        return original(self, slicenode, target)

    _subscript_expr.__doc__ = original.__doc__
    patches.set(DaCeKeywordRemover, "_subscript_expr", _subscript_expr)
