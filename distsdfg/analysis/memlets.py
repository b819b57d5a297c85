"""Index analysis of memlets: which map parameter indexes each dimension of an access."""
from __future__ import annotations

from typing import List, Optional, Sequence

import dace
import sympy
from dace import symbolic

from ..values.exprs import same_value

__all__ = ["dim_params"]


def dim_params(memlet: dace.Memlet, params: Sequence[str]) -> List[Optional[str]]:
    """For each dimension of ``memlet``, the single map parameter indexing it as ``p + c``, else None."""
    pset = {symbolic.pystr_to_symbolic(p) for p in params}
    out = []
    for b, e, _ in memlet.subset.ndrange():
        b = sympy.sympify(b)
        fs = b.free_symbols & pset
        if same_value(b, e) and len(fs) == 1:
            p = next(iter(fs))
            out.append(str(p) if not (sympy.expand(b - p).free_symbols & pset) else None)
        else:
            out.append(None)
    return out
