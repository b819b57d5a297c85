"""The picture of a plan (``distsdfg plan --plot FILE.png|.svg``): per kernel its process grid,
which block of each array every rank holds, and the bytes each move costs.

One row per kernel that moves data, in program order. On the left the kernel's process grid, each
rank a coloured cell; to its right one panel per array the kernel receives or hands on, the array
drawn whole (its last two dimensions) with every rank's block in that rank's colour, titled with
the MPI calls that move it and their bytes. Drawn with matplotlib (``pip install matplotlib``, in
the ``bench`` extra); ``plan_rows`` gives the same content as data.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional, Tuple

from ..values.modes import StepKind

__all__ = ["ArrayBlocks", "KernelRow", "plan_rows", "draw_plan", "format_bytes"]


@dataclasses.dataclass(frozen=True)
class ArrayBlocks:
    """One array as a step moves it for a kernel: per rank its block (start, size) of the array."""
    array: str
    direction: str                   # "in" (the kernel reads it), "out" (it hands it on)
    how: str                         # the MPI calls ('Scatterv', 'Alltoallw+...'), or the step's kind
    nbytes: int                      # sent by all ranks, one run of the step
    shape: Tuple[int, ...]
    blocks: Tuple[Tuple[Tuple[int, ...], Tuple[int, ...]], ...]
    partial: bool = False            # the ranks hold partial sums of the blocks
    repeats: object = 1              # runs per call (a loop's trip count)


@dataclasses.dataclass(frozen=True)
class KernelRow:
    """A kernel of the plan: its map key, the user's source line, its grid, the arrays it moves."""
    label: str
    source: str
    grid: Tuple[int, ...]
    arrays: Tuple[ArrayBlocks, ...]


def format_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def plan_rows(sdfg, *, nprocs: Optional[int] = None, **sizes) -> List[KernelRow]:
    """The rows of the picture for concrete sizes: every kernel with a step, in program order."""
    from ..solver.report import solved_steps
    from ..solver.solve import ConcreteRedist, comm_steps
    low, values, solved = solved_steps(sdfg, nprocs=nprocs, **sizes)
    kernels = {k.index: k for k in low.kernels}
    rows: Dict[object, List] = {}
    for cs in solved:
        spec = cs.spec
        if spec.kind == StepKind.FILL:
            continue
        calls = comm_steps(cs, values)
        how = "+".join(dict.fromkeys(c.collective for c in calls)) or "local copy"
        nbytes = sum(sum(c.sent) for c in calls)
        if isinstance(cs, ConcreteRedist):
            blocks, direction = cs.dst_blocks, "in"
        else:
            blocks, direction = cs.blocks, "in" if spec.kind == StepKind.SCATTER else "out"
        kernel = _kernel_of(low, spec)
        rows.setdefault(kernel if kernel is not None else spec.kernel_label, []).append(ArrayBlocks(
            spec.array, direction, how, nbytes, tuple(cs.global_shape),
            tuple((tuple(b.start), tuple(b.size)) for b in blocks), "reduce" in how.lower(),
            calls[0].repeats if calls else 1))
    out = []
    for key, arrays in rows.items():
        k = kernels.get(key)
        label = _key(low, k) if k is not None else str(key)
        grid = tuple(k.grid) if k is not None else ()
        out.append(KernelRow(label, k.source if k is not None else "", grid, tuple(arrays)))
    return out


def _key(low, k) -> str:
    """The map key a schedule gives the kernel ``k`` (its main map), else its label."""
    named = [key for key in k.keys if key in low.schedule]
    return (named or list(k.keys) or [k.label])[0]


def _kernel_of(low, spec) -> Optional[int]:
    """The index of the kernel a step serves (a grid-to-grid step names its consumer by label)."""
    if spec.kernel >= 0:
        return spec.kernel
    same = [k.index for k in low.kernels if k.label == spec.kernel_label]
    return same[0] if len(same) == 1 else None


# -- drawing ----------------------------------------------------------------------------------------
def _colours(P: int):
    import matplotlib
    cmap = matplotlib.colormaps["tab10" if P <= 10 else "tab20" if P <= 20 else "turbo"]
    return [cmap(r if P <= 20 else r / max(P - 1, 1)) for r in range(P)]


def _grid_shape(grid: Tuple[int, ...]) -> Tuple[int, int]:
    """Rows and columns of a grid drawn flat: its first axis down, the others across."""
    if not grid:
        return 1, 1
    return grid[0], math.prod(grid[1:]) if len(grid) > 1 else 1


def _draw_grid(ax, row: KernelRow, colours) -> None:
    rows, cols = _grid_shape(row.grid)
    for r in range(rows * cols):
        y, x = divmod(r, cols)
        ax.add_patch(_rect(x, y, 1, 1, colours[r % len(colours)], alpha=0.85))
        if rows * cols <= 64:
            ax.text(x + 0.5, y + 0.5, str(r), ha="center", va="center", fontsize=8, color="white", weight="bold")
    ax.set_xlim(-0.1, cols + 0.1)
    ax.set_ylim(rows + 0.1, -0.1)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_visible(False)
    title = f"{row.label}\ngrid {row.grid}" if row.grid else row.label
    if row.source:
        title += "\n" + _wrap(row.source, 36, lines=2)
    ax.set_title(title, fontsize=8, loc="left")


def _rect(x, y, w, h, colour, alpha):
    from matplotlib.patches import Rectangle
    return Rectangle((x, y), w, h, facecolor=colour, edgecolor="black", linewidth=0.6, alpha=alpha)


def _wrap(text: str, width: int, lines: int) -> str:
    """``text`` in lines of ``width`` characters, at most ``lines`` of them (the last cut with ...)."""
    parts = [text[i:i + width] for i in range(0, len(text), width)]
    if len(parts) > lines:
        parts = parts[:lines]
        parts[-1] = parts[-1][:width - 3] + "..."
    return "\n".join(parts)


def _box(shape, start, size) -> Tuple[int, int, int, int]:
    """(row, column, rows, columns) of a block in the array's last two dimensions."""
    if len(shape) >= 2:
        return start[-2], start[-1], size[-2], size[-1]
    if len(shape) == 1:
        return 0, start[0], 1, size[0]
    return 0, 0, 1, 1


def _draw_array(ax, a: ArrayBlocks, colours) -> None:
    shape = a.shape[-2:] if len(a.shape) >= 2 else (1,) + tuple(a.shape[-1:] or (1,))
    h, w = shape
    ax.add_patch(_rect(0, 0, w, h, "white", 1.0))
    boxes: Dict[Tuple, List[int]] = {}
    for rank, (start, size) in enumerate(a.blocks):
        if size and not all(size):       # this rank holds none of it
            continue
        boxes.setdefault(_box(a.shape, start, size), []).append(rank)
    for (y, x, bh, bw), ranks in boxes.items():
        ax.add_patch(_rect(x, y, bw, bh, colours[ranks[0] % len(colours)], alpha=0.75 if len(boxes) > 1 else 0.6))
        if len(colours) <= 32:
            label = ",".join(str(r) for r in ranks) if len(ranks) <= 4 else f"{ranks[0]}..{ranks[-1]}"
            ax.text(x + bw / 2, y + bh / 2, label, ha="center", va="center", fontsize=7)
    ax.set_xlim(0, w)
    ax.set_ylim(h, 0)
    if len(a.shape) < 2:        # a vector: a strip
        ax.set_aspect(max(w / 8, 1e-9))
    else:
        ax.set_aspect("equal" if max(h, w) <= 8 * min(h, w) else "auto")
    ax.set_xticks([0, w])
    ax.set_yticks([0, h] if len(a.shape) >= 2 else [])
    ax.tick_params(labelsize=6, length=2)
    dims = "x".join(str(d) for d in a.shape) or "1"
    kind = " partial sums" if a.partial else ""
    arrow = "->" if a.direction == "in" else "<-"
    times = "" if a.repeats == 1 else f" x {a.repeats}"
    ax.set_title(f"{arrow} {a.array} [{dims}]{kind}\n{a.how}: {format_bytes(a.nbytes)}{times}", fontsize=8)


def draw_plan(rows: List[KernelRow], path: str, *, nprocs: int, title: str = "") -> None:
    """Draw ``rows`` into ``path`` (its extension picks the format: .png, .svg, .pdf)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colours = _colours(nprocs)
    ncols = 1 + max([len(r.arrays) for r in rows] + [1])
    fig, axes = plt.subplots(max(len(rows), 1), ncols, figsize=(2.4 * ncols, 2.3 * max(len(rows), 1)),
                             squeeze=False, gridspec_kw={"width_ratios": [1.3] + [1] * (ncols - 1)})
    for i, row in enumerate(rows):
        _draw_grid(axes[i][0], row, colours)
        for j in range(1, ncols):
            if j - 1 < len(row.arrays):
                _draw_array(axes[i][j], row.arrays[j - 1], colours)
            else:
                axes[i][j].axis("off")
    if not rows:
        axes[0][0].text(0.5, 0.5, "no data moves between ranks", ha="center")
        axes[0][0].axis("off")
    total = sum(a.nbytes for r in rows for a in r.arrays)
    fig.suptitle(f"{title}  ({nprocs} ranks; {format_bytes(total)} sent, each step once)".strip(), fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    fig.savefig(path, dpi=110)
    plt.close(fig)
