"""Sample programs after DaCe's own transformations (lowering composes with them).

``get("mlp@auto_optimize")`` (``distsdfg.testing.programs.get``) is the program ``mlp`` whose SDFG
went through DaCe's ``auto_optimize`` for the CPU before lowering; ``@MapFusion`` applies map
fusion wherever it matches, ``@MapTiling`` tiles every top-level map (tiles of 4 by 3 by ...).
The SDFG keeps a name of its own, so that its build never collides with the plain program's.
"""
from __future__ import annotations

from ..dace_compat.semantics import parse as semantic_parse
import dataclasses
import warnings

from .program import Program

__all__ = ["TRANSFORMS", "TransformedProgram", "transformed"]


def _auto_optimize(sdfg):
    import dace
    from dace.transformation.auto.auto_optimize import auto_optimize
    auto_optimize(sdfg, dace.DeviceType.CPU)


def _map_fusion(sdfg):
    from dace.transformation.dataflow import MapFusion
    sdfg.apply_transformations_repeated(MapFusion)


def _map_tiling(sdfg):
    from dace.sdfg import nodes
    from dace.transformation.dataflow import MapTiling
    for state in sdfg.states():
        scopes = state.scope_dict()
        for entry in [n for n in state.nodes() if isinstance(n, nodes.MapEntry) and scopes[n] is None]:
            sizes = tuple([4, 3, 2][d % 3] for d in range(len(entry.map.params)))
            MapTiling.apply_to(sdfg, options={"tile_sizes": sizes}, map_entry=entry)


TRANSFORMS = {"auto_optimize": _auto_optimize, "MapFusion": _map_fusion, "MapTiling": _map_tiling}


@dataclasses.dataclass(frozen=True)
class TransformedProgram(Program):
    transform: str = ""

    def sdfg(self):
        sd = semantic_parse(self.prog)
        sd.name = f"{sd.name}_{self.transform.lower()}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            TRANSFORMS[self.transform](sd)
        return sd


def transformed(program: Program, transform: str) -> TransformedProgram:
    if transform not in TRANSFORMS:
        raise KeyError(f"unknown transformation {transform!r}; one of {sorted(TRANSFORMS)}")
    fields = {f.name: getattr(program, f.name) for f in dataclasses.fields(Program)}
    fields["name"] = f"{program.name}@{transform}"
    return TransformedProgram(**fields, transform=transform)
