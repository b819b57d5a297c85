"""Work-partitioning schedules: which process-grid shape each top-level map gets."""
from __future__ import annotations

import dataclasses
import difflib
import json
import math
from typing import Iterable, Mapping, Optional, Tuple, Union

from ..dace_compat.source import named
from ..errors import GridShapeError, ScheduleError, UnknownMapError

__all__ = ["Schedule", "ScheduleLike", "grid_size", "resolve_names"]

Grid = Tuple[int, ...]


def grid_size(grid: Iterable[int]) -> int:
    """Number of ranks a grid uses."""
    return math.prod(grid)


@dataclasses.dataclass(frozen=True, slots=True)
class Schedule:
    """A frozen mapping ``map key -> process-grid shape`` (one entry per map parameter).

    Example: ``Schedule.of({"_MatMult_.gemm_map": (2, 2, 1)})`` splits the ``i`` and ``j``
    axes of a matmul two ways each, so four ranks each compute one 2x2 block of C.
    ``sdfg`` optionally names the SDFG the schedule was made for; ``lower`` refuses a
    schedule made for another SDFG.
    """

    grids: Tuple[Tuple[str, Grid], ...] = ()
    sdfg: Optional[str] = None

    def __post_init__(self):
        if isinstance(self.grids, Mapping):     # Schedule({key: grid}) reads as Schedule.of({key: grid})
            object.__setattr__(self, "grids", Schedule.of(self.grids).grids)
        seen = set()
        for key, grid in self.grids:
            if not isinstance(key, str):
                raise ScheduleError(f"schedule keys are map keys (strings), got {key!r}")
            if key in seen:
                raise ScheduleError(f"map `{key}` appears twice in the schedule")
            seen.add(key)
            if not isinstance(grid, tuple) or not grid:
                raise GridShapeError(f"map `{key}`: a grid is a non-empty tuple of positive ints, got {grid!r}")
            for d in grid:
                if not isinstance(d, int) or isinstance(d, bool) or d < 1:
                    raise GridShapeError(
                        f"map `{key}` has grid {grid}: every dimension must be a positive integer "
                        f"(use 1 to leave an axis unsplit)")

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def of(cls, mapping: Mapping[str, Iterable[int]], *, sdfg: Optional[str] = None) -> "Schedule":
        items = []
        for key, grid in mapping.items():
            try:
                g = tuple(int(d) if not isinstance(d, bool) and float(d) == int(d) else d for d in grid)
            except (TypeError, ValueError):
                raise GridShapeError(f"map `{key}`: grid {grid!r} is not a sequence of integers") from None
            if not isinstance(key, str) and isinstance(getattr(key, "key", None), str):
                key = key.key       # a MapInfo of distsdfg.maps(sdfg), used as the key it names
            items.append((str(key), g))
        return cls(tuple(sorted(items)), sdfg)

    @classmethod
    def from_json(cls, text: Union[str, dict]) -> "Schedule":
        try:
            data = json.loads(text) if isinstance(text, str) else text
        except json.JSONDecodeError as exc:
            raise ScheduleError(f"a schedule in JSON is {{\"grids\": {{map key: [d1, d2, ...]}}}}; this text is "
                                f"not JSON ({exc})") from None
        grids = data.get("grids", data) if isinstance(data, dict) else data
        if not isinstance(grids, dict):
            raise ScheduleError(f"a schedule in JSON maps map keys to grids, got {type(grids).__name__}")
        sdfg = data.get("sdfg") if isinstance(data, dict) and "grids" in data else None
        return cls.of({k: tuple(v) for k, v in grids.items()}, sdfg=sdfg)

    def to_json(self) -> str:
        return json.dumps({"sdfg": self.sdfg, "grids": {k: list(g) for k, g in self.grids}}, sort_keys=True)

    # -- access ---------------------------------------------------------------------------------
    def as_dict(self) -> dict:
        return dict(self.grids)

    def get(self, key: str, default=None):
        return self.as_dict().get(key, default)

    def __getitem__(self, key: str) -> Grid:
        d = self.as_dict()
        if key not in d:
            raise KeyError(key)
        return d[key]

    def __contains__(self, key) -> bool:
        return key in self.as_dict()

    def __iter__(self):
        return iter(k for k, _ in self.grids)

    def __len__(self):
        return len(self.grids)

    def keys(self):
        return [k for k, _ in self.grids]

    def items(self):
        return list(self.grids)

    @property
    def nprocs(self) -> int:
        """The largest grid: how many ranks the schedule needs at least."""
        return max((grid_size(g) for _, g in self.grids), default=1)

    def with_sdfg(self, name: str) -> "Schedule":
        return dataclasses.replace(self, sdfg=name)

    def __str__(self) -> str:
        body = ", ".join(f"{k} -> ({', '.join(map(str, g))}{',' if len(g) == 1 else ''})" for k, g in self.grids)
        return "{" + body + "}"

    def validate_for(self, known: Mapping[str, int], *, sdfg_name: Optional[str] = None,
                     sources: Mapping[str, str] = {}) -> None:
        """Check keys and grid lengths against ``known`` (map key -> number of parameters); errors
        name a map with its source line from ``sources`` (map key -> ``file.py:LINE text``)."""
        if self.sdfg is not None and sdfg_name is not None and self.sdfg != sdfg_name:
            raise ScheduleError(
                f"this schedule was made for SDFG `{self.sdfg}`, not `{sdfg_name}`; "
                f"build a schedule from distsdfg.maps() of this SDFG")
        for key, grid in self.grids:
            if key not in known:
                close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.0)
                hint = f"; did you mean `{close[0]}`{_at(sources.get(close[0], ''))}?" if close else ""
                raise UnknownMapError(
                    f"schedule names map `{key}`, which this SDFG does not have{hint} "
                    f"(known keys: {', '.join(sorted(known))})")
            if len(grid) != known[key]:
                raise GridShapeError(
                    f"{named(key, sources.get(key, ''))} has {known[key]} parameters but its grid {grid} has {len(grid)} "
                    f"dimensions; give one grid dimension per map parameter")


def _at(source: str) -> str:
    return f" ({source})" if source else ""


ScheduleLike = Union[Schedule, Mapping[str, Iterable[int]]]


def as_schedule(schedule: ScheduleLike) -> Schedule:
    if isinstance(schedule, Schedule):
        return schedule
    if isinstance(schedule, Mapping):
        return Schedule.of(schedule)
    raise ScheduleError(f"a schedule is a distsdfg.Schedule or a dict {{map key: grid}}, got {type(schedule).__name__}")


def resolve_names(grids: Mapping, infos, main, *, fuzzy: bool = False) -> dict:
    """``{map key: grid}`` from grids named by key, label or ``"*"`` (``distsdfg.schedule_by_label``).
    ``infos``: every map (objects with ``key``, ``label``, ``params``); ``main``: the main map of each
    kernel that may be split, which ``"*"`` names when its parameter count equals the grid's length.
    A name that matches nothing is kept as given, so that ``validate_for`` refuses it by name."""
    out = {}
    for name, grid in grids.items():
        if not isinstance(name, str) and isinstance(getattr(name, "key", None), str):
            name = name.key
        try:
            grid = tuple(grid)
        except TypeError:
            raise GridShapeError(f"`{name}`: grid {grid!r} is not a sequence of integers; give one per map "
                                 f"parameter, e.g. (2, 1)") from None
        if name == "*":
            continue
        hits = ([m for m in infos if m.key == name] or [m for m in infos if m.label == name]
                or [m for m in infos if m.key.endswith("." + name)]
                or ([m for m in infos if name in m.key] if fuzzy else []))
        for key in [m.key for m in hits] or [name]:
            out.setdefault(key, tuple(grid))
    if "*" in grids:
        grid = tuple(grids["*"])
        for m in main:
            if len(m.params) == len(grid) and m.key not in out:
                out[m.key] = grid
    return out
