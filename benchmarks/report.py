"""Tables (Markdown) and plots (PNG) of the benchmark's results.

Figures per row: median wall time with the spread (min-max) of the repeats; time relative to
the hand-written mpi4py version and to Dask at the same P; bytes moved: ``bytes`` is the
sum over ranks of the bytes sent as the PMPI library counted them, ``x min`` the ratio to
the fewest bytes any MPI contender moved for that workload and P, ``x model`` the ratio to
the schedule's predicted minimum (``distsdfg.schedule_cost`` with the bytes model), ``x I/O``
the busiest rank's received bytes over Ballard et al.'s memory-independent lower bound
(matrix products only); ``PMPI = report``: the counts equal ``comm_report``, call by call
and rank by rank.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

Row = Dict[str, object]


def resolve_same(rows: Sequence[Row]) -> List[Row]:
    """Rows whose schedule equals an earlier one's take that row's figures (marked ``same_as``)."""
    by_key = {(r["workload"], r["nprocs"], r["contender"]): r for r in rows}
    out = []
    for r in rows:
        if r.get("status") == "same":
            src = by_key.get((r["workload"], r["nprocs"], r["same_as"]), {})
            r = {**src, **{k: r[k] for k in ("workload", "nprocs", "contender", "same_as", "schedule")}}
        out.append(r)
    return out


def sent_total(r: Row) -> Optional[int]:
    t = r.get("pmpi_total")
    return sum(t["sent"]) if t else None


def min_bytes(rows: Sequence[Row]) -> Dict[Tuple[str, int], int]:
    """Per (workload, P): the fewest bytes any correct MPI contender moved."""
    out: Dict[Tuple[str, int], int] = {}
    for r in rows:
        b = sent_total(r)
        if b is not None and r.get("correct"):
            key = (r["workload"], r["nprocs"])
            out[key] = min(out.get(key, b), b)
    return out


def median_of(rows: Sequence[Row], workload: str, nprocs: int, contender: str) -> Optional[float]:
    for r in rows:
        if (r["workload"], r["nprocs"], r["contender"]) == (workload, nprocs, contender) and r.get("median"):
            return float(r["median"])
    return None


def derived(rows: Sequence[Row]) -> List[Row]:
    """Every row with its ratios: time vs mpi4py and Dask, bytes vs the minimum, the model and the I/O bound."""
    rows = resolve_same(rows)
    least = min_bytes(rows)
    out = []
    for r in rows:
        d = dict(r)
        key = (r["workload"], r["nprocs"])
        for other in ("mpi4py", "dask", "jax"):
            base = median_of(rows, *key, other)
            d[f"vs_{other}"] = r["median"] / base if base and r.get("median") else None
        b = sent_total(r)
        d["bytes"] = b
        d["x_min"] = b / least[key] if b is not None and least.get(key) else (1.0 if b == 0 else None)
        d["x_model"] = b / r["model_bytes"] if b is not None and r.get("model_bytes") else None
        lb = r.get("io_lower_bound")
        d["x_io"] = max(r["pmpi_total"]["received"]) / lb if lb and r.get("pmpi_total") else None
        out.append(d)
    return out


def _f(x, fmt: str, none: str = "") -> str:
    return none if x is None else format(x, fmt)


def _time(r: Row) -> str:
    if r.get("median") is None:
        return ""
    return f"{r['median'] * 1e3:.2f} ({r['min'] * 1e3:.2f}-{r['max'] * 1e3:.2f})"


def _status(r: Row) -> str:
    if r.get("status") in ("failed", "not available"):
        return f"{r['status']}: {r.get('reason', '')}".replace("|", "/").replace("\n", " ")[:160]
    ok = "yes" if r.get("correct") else f"NO (err {_f(r.get('rel_err'), '.1e')})"
    return ok + (f"; same schedule as {r['same_as']}" if r.get("same_as") else "")


def _match(r: Row) -> str:
    if "pmpi_equals_report" not in r:
        return ""
    return "yes" if r["pmpi_equals_report"] else "NO"


def table(rows: Sequence[Row]) -> str:
    """The full table: one line per workload, P and contender."""
    head = ("| workload | P | contender | ms: median (min-max) | x mpi4py | x Dask | x JAX | bytes sent | x min "
            "| x model | x I/O | PMPI = report | correct |")
    lines = [head, "|" + "---|" * 13]
    for r in derived(rows):
        lines.append("| " + " | ".join([
            r["workload"], str(r["nprocs"]), r["contender"], _time(r), _f(r.get("vs_mpi4py"), ".2f"),
            _f(r.get("vs_dask"), ".2f"), _f(r.get("vs_jax"), ".2f"), _f(r.get("bytes"), ","), _f(r.get("x_min"), ".2f"),
            _f(r.get("x_model"), ".3f"), _f(r.get("x_io"), ".2f"), _match(r), _status(r)]) + " |")
    return "\n".join(lines)


def headline(rows: Sequence[Row], nprocs: Sequence[int]) -> str:
    """Per workload: distsdfg auto's time relative to mpi4py, Dask, JAX and Heat on each P, and its
    bytes relative to the minimum."""
    rows = derived(rows)
    cols = [f"{what} P={p}" for p in nprocs for what in ("x mpi4py", "x Dask", "x JAX", "x Heat", "bytes x min")]
    lines = ["| workload | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 1)]
    for w in dict.fromkeys(r["workload"] for r in rows):
        cells = []
        for p in nprocs:
            auto = next((r for r in rows if (r["workload"], r["nprocs"], r["contender"]) == (w, p, "distsdfg auto")),
                        {})
            heat = median_of(rows, w, p, "heat")
            cells += [_f(auto.get("vs_mpi4py"), ".2f", "-"), _f(auto.get("vs_dask"), ".2f", "-"),
                      _f(auto.get("vs_jax"), ".2f", "-"),
                      _f(auto["median"] / heat if heat and auto.get("median") else None, ".2f", "n/a"),
                      _f(auto.get("x_min"), ".2f", "-")]
        lines.append(f"| {w} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def scaling_table(rows: Sequence[Row]) -> str:
    lines = ["| workload | P | plan s | lower s | tables s | bytes (comm_report) |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['workload']} | {r['nprocs']} | {r['error'][:100]} | | | |")
        else:
            tables = f"{r['tables_s']:.2f} | {r['bytes']:,}" if "tables_s" in r else "not run | "
            lines.append(f"| {r['workload']} | {r['nprocs']} | {r['plan_s']:.2f} | {r['lower_s']:.2f} | {tables} |")
    return "\n".join(lines)


def plot_times(rows: Sequence[Row], path: str) -> bool:
    """Bars of median time (log scale, whiskers min-max) per contender, one panel per workload and
    P; False when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [r for r in derived(rows) if r.get("median")]
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    contenders = list(dict.fromkeys(r["contender"] for r in rows))
    colors = {c: plt.cm.tab10(i % 10) for i, c in enumerate(contenders)}
    cols = 4
    fig, axes = plt.subplots((len(workloads) + cols - 1) // cols, cols, figsize=(4.2 * cols, 3.4 * ((len(workloads)
                             + cols - 1) // cols)), squeeze=False)
    for ax, w in zip(axes.flat, workloads):
        mine = [r for r in rows if r["workload"] == w]
        procs = sorted({r["nprocs"] for r in mine})
        width = 0.8 / max(len(contenders), 1)
        for i, c in enumerate(contenders):
            labelled = False        # one legend entry per contender (its first bar; not every P has every contender)
            for j, p in enumerate(procs):
                r = next((x for x in mine if x["contender"] == c and x["nprocs"] == p), None)
                if r is None:
                    continue
                x = j + (i - len(contenders) / 2) * width
                ax.bar(x, r["median"] * 1e3, width, color=colors[c], label=None if labelled else c,
                       yerr=[[(r["median"] - r["min"]) * 1e3], [(r["max"] - r["median"]) * 1e3]], capsize=1.5)
                labelled = True
        ax.set_xticks(range(len(procs)), [f"P={p}" for p in procs])
        ax.set_yscale("log")
        ax.set_title(w, fontsize=10)
        ax.set_ylabel("ms")
    for ax in list(axes.flat)[len(workloads):]:
        ax.axis("off")
    handles = {h.get_label(): h for ax in axes.flat for h in ax.get_legend_handles_labels()[0]}
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(len(handles), 4), fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_scaling(rows: Sequence[Row], path: str) -> bool:
    """Plan, lower and table times against P (log-log), one line per workload and step."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [r for r in rows if "error" not in r]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), sharey=True)
    for ax, step in zip(axes, ("plan_s", "lower_s", "tables_s")):
        for w in dict.fromkeys(r["workload"] for r in rows):
            mine = [r for r in rows if r["workload"] == w and step in r]
            ax.plot([r["nprocs"] for r in mine], [r[step] for r in mine], marker="o", label=w)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("P (ranks)")
        ax.set_title(step[:-2])
    axes[0].set_ylabel("seconds")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
