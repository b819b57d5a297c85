"""The package's shape: stages that import only earlier stages, no import cycle among
distsdfg's modules, no module over 500 lines.

Both are read off the source (the AST of every module, imports written inside functions
included); nothing is imported or run. The lists below record what is not done yet: they may
only shrink. A new cycle, a known cycle that grows, or a new module over the limit fails.
"""
import ast
import functools
import os

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "distsdfg")
#: One concept per module, however long it needs: a cohesive module may grow past a few hundred lines
#: (splitting a concept to satisfy a count is worse). Past this many, a module almost surely holds
#: several concepts, and the test asks for a look.
MAX_LINES = 1500

#: The subpackages in data-flow order (docs/architecture.md). A module may import modules of its own
#: stage or of earlier ones. The top-level modules: ``errors`` and ``checks`` come first, ``api`` (the
#: public functions) after the runtime, the package's ``__init__`` and ``__main__`` last.
STAGES = ["config", "errors", "checks", "geometry", "dace_compat", "values", "analysis", "solver", "mpi", "lowering", "planner",
          "runtime", "frontend", "api", "launch", "testing"]

#: Import cycles not yet taken apart, each a set of modules (strongly connected).
KNOWN_CYCLES: list = []

#: Modules over MAX_LINES lines, not yet split.
KNOWN_LONG: set = set()


def _modules():
    out = {}
    root = os.path.dirname(PACKAGE)
    for folder, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                name = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                out[name[:-len(".__init__")] if name.endswith(".__init__") else name] = path
    return out


def _targets(module: str, path: str, node, modules) -> list:
    """The package's modules an import statement names."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
            base = base[:len(base) - node.level + 1]
            pkg = ".".join(base + ([node.module] if node.module else []))
        else:
            pkg = node.module or ""
        names = [f"{pkg}.{a.name}" if f"{pkg}.{a.name}" in modules else pkg for a in node.names]
    out = []
    for n in names:
        while n not in modules and "." in n:
            n = n.rsplit(".", 1)[0]
        if n in modules and n != module and n != "distsdfg":
            out.append(n)
    return out


@functools.lru_cache(maxsize=1)
def import_graph():
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        graph[name] = frozenset(t for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                       for t in _targets(name, path, node, modules))
    return graph


def cycles(graph):
    """Strongly connected sets of more than one module (Tarjan, iterative)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                scc = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    scc.add(w)
                    if w == v:
                        break
                if len(scc) > 1:
                    out.append(scc)
    return out


def _path(graph, scc):
    """One cycle through ``scc``, as ``a -> b -> ... -> a``."""
    start = min(scc)
    prev, todo = {start: None}, [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(graph[v] & scc):
            if w == start:
                chain = [v]
                while prev[chain[-1]] is not None:
                    chain.append(prev[chain[-1]])
                return " -> ".join(list(reversed(chain)) + [start])
            if w not in prev:
                prev[w] = v
                todo.append(w)
    return ", ".join(sorted(scc))


def test_no_new_import_cycle():
    graph = import_graph()
    assert "distsdfg.solver.solve" in graph and graph["distsdfg.solver.solve"]
    bad = [scc for scc in cycles(graph) if not any(scc <= known for known in KNOWN_CYCLES)]
    assert not bad, "import cycles in distsdfg: " + "; ".join(_path(graph, scc) for scc in bad)


def test_known_cycles_are_still_there():
    """A cycle taken apart leaves the list (so the list only records real ones)."""
    found = cycles(import_graph())
    gone = [sorted(k) for k in KNOWN_CYCLES if not any(k <= scc for scc in found)]
    assert not gone, f"no longer a cycle, remove from KNOWN_CYCLES: {gone}"


def test_cycle_finder():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(g) == [{"a", "b", "c"}]
    assert _path(g, {"a", "b", "c"}) == "a -> b -> c -> a"
    assert cycles({"a": {"b"}, "b": set()}) == []


def _lengths():
    out = {}
    for name, path in _modules().items():
        with open(path) as f:
            out[name] = sum(1 for _ in f)
    return out


def test_no_new_long_module():
    long = {m: n for m, n in _lengths().items() if n > MAX_LINES}
    new = sorted(f"{m} ({n} lines)" for m, n in long.items() if m not in KNOWN_LONG)
    assert not new, f"modules over {MAX_LINES} lines: {', '.join(new)}; one concept per module: move out what is a concept of its own"
    done = sorted(m for m in KNOWN_LONG if m not in long)
    assert not done, f"no longer over {MAX_LINES} lines, remove from KNOWN_LONG: {done}"


@pytest.mark.parametrize("module", ["distsdfg.solver.report", "distsdfg.lowering.placement", "distsdfg.planner.predict",
                                    "distsdfg.planner.auto", "distsdfg.solver.solve"])
def test_planning_and_reports_do_not_import_the_runtime(module):
    """Reports, layouts, predictions and the planner solve plans without the executor."""
    graph = import_graph()
    seen, todo = set(), [module]
    while todo:
        v = todo.pop()
        for w in graph[v] - seen:
            seen.add(w)
            todo.append(w)
    assert "distsdfg.runtime.program" not in seen, f"{module} imports distsdfg.runtime.program (directly or through others)"


def stage_of(module: str) -> str:
    return module.split(".")[1]


def test_every_module_is_in_a_stage():
    stray = sorted(m for m in import_graph() if m not in ("distsdfg", "distsdfg.__main__") and stage_of(m) not in STAGES)
    assert not stray, f"modules outside the stages {STAGES}: {stray}; put them in a stage's subpackage"


def test_stages_import_only_earlier_stages():
    """Imports go down the data flow: schedule -> analysis -> solver -> lowering -> runtime -> launch."""
    rank = {s: i for i, s in enumerate(STAGES)}
    up = sorted(f"{m} -> {t}" for m, targets in import_graph().items() if m not in ("distsdfg", "distsdfg.__main__")
                for t in targets if rank[stage_of(t)] > rank[stage_of(m)])
    assert not up, "imports of a later stage: " + "; ".join(up)
