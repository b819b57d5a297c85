"""The test programs' record: a DaCe program with its NumPy reference and an input maker.

``programs.PROGRAMS`` registers them; the families built on the same record
(``accumulations``, ``triangular``, ``transformed``) import it from here.
"""
from __future__ import annotations

from ..dace_compat.semantics import parse as semantic_parse
import dataclasses
from typing import Callable, Dict, Tuple

import numpy as np

__all__ = ["Program"]


@dataclasses.dataclass(frozen=True)
class Program:
    name: str
    prog: object                              # the @dace.program
    inputs: Callable[[np.random.Generator], Dict[str, np.ndarray]]
    reference: Callable[..., object]
    symbols: Tuple[Tuple[str, int], ...] = ()
    #: Arguments the program updates in place; ``reference`` then returns their final values as a dict.
    outputs: Tuple[str, ...] = ()

    def sdfg(self):
        sd = semantic_parse(self.prog)
        return sd
