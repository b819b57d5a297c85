"""Timing of a program's kernels and communication steps, recorded in the compiled program.

A DaCe instrumentation provider (``TRACE``) brackets every node marked with it: a top-level map,
a library node (through its expansion), a tasklet. The generated program keeps the events (kind,
start and end in microseconds of the system clock, name) in a list that
``take_events(compiled)`` reads and empties through the exported function
``__distsdfg_trace_take``. ``traced(sdfg, ...)`` marks an SDFG's kernels and steps for a build.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
from typing import Callable, Iterator, List, NamedTuple

import dace
from dace import dtypes, registry
from dace.codegen.instrumentation.provider import InstrumentationProvider
from dace.codegen.prettycode import CodeIOStream
from dace.sdfg import SDFG, SDFGState, nodes

from .source import source_line, source_of

__all__ = ["TRACE", "KERNEL", "NODE", "Event", "traced", "is_marked", "expand_marked", "take_events", "event_name",
           "remove_report_folder", "library_symbol"]

if not hasattr(dtypes.InstrumentationType, "distsdfg_Trace"):
    dtypes.InstrumentationType.register("distsdfg_Trace")
#: The instrumentation type whose provider records distsdfg's trace events.
TRACE = dtypes.InstrumentationType.distsdfg_Trace

#: Event kinds: a kernel (a map, a library node, a nested SDFG), a tasklet (a communication step).
KERNEL, NODE = 0, 1

#: The attribute that marks a library node (DaCe gives library nodes no instrumentation property);
#: a plain attribute, kept by DaCe's deep copies within the process that generates the code.
MARK = "_distsdfg_trace"

_RECORDER = r"""
#ifndef DISTSDFG_TRACE_RECORDER
#define DISTSDFG_TRACE_RECORDER
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
namespace distsdfg_trace {
struct Event { int kind; double t0, t1; const char* name; };
static std::vector<Event> events;
static inline double now() {
    return std::chrono::duration<double, std::micro>(std::chrono::system_clock::now().time_since_epoch()).count();
}
static inline void record(int kind, double t0, const char* name) { events.push_back(Event{kind, t0, now(), name}); }
// Records the time from its construction to the end of the enclosing block.
struct Scope {
    int kind;
    double t0;
    const char* name;
    Scope(int k, const char* n) : kind(k), t0(now()), name(n) {}
    ~Scope() { record(kind, t0, name); }
};
}  // namespace distsdfg_trace
// The events as lines "kind<TAB>start<TAB>end<TAB>name"; returns their length. When ``cap`` holds
// them and a terminating zero, they are written to ``buf`` and the list is emptied.
DACE_EXPORTED long long __distsdfg_trace_take(char* buf, long long cap) {
    std::string text;
    char head[96];
    for (const auto& e : distsdfg_trace::events) {
        std::snprintf(head, sizeof head, "%d\t%.3f\t%.3f\t", e.kind, e.t0, e.t1);
        text += head;
        text += e.name;
        text += '\n';
    }
    const long long n = static_cast<long long>(text.size());
    if (buf != nullptr && cap > n) {
        std::memcpy(buf, text.data(), static_cast<size_t>(n));
        buf[n] = '\0';
        distsdfg_trace::events.clear();
    }
    return n;
}
#endif
"""


class Event(NamedTuple):
    """One recorded event: ``kind`` (KERNEL or NODE), start and end (microseconds, system clock), name."""
    kind: int
    t0: float
    t1: float
    name: str


def event_name(label: str, source: str = "") -> str:
    """The name a node's events carry: its label, and ``|`` and the user's source line if known."""
    return f"{label}|{source}" if source else label


def _literal(text: str) -> str:
    """``text`` as a C++ string literal (ASCII; no tab or newline, which the event lines use)."""
    text = "".join(c if 32 <= ord(c) < 127 else "?" for c in text)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _arg(args, kind):
    return next((a for a in args if isinstance(a, kind)), None)


@registry.autoregister_params(type=TRACE)
class TraceProvider(InstrumentationProvider):
    """Brackets marked maps, tasklets and SDFGs with the recorder's clock (the hooks take DaCe's
    arguments by type, as their order differs between DaCe versions)."""

    def __init__(self):
        super().__init__()
        self._open = {}
        self._count = 0

    def _begin(self, stream: CodeIOStream, key) -> None:
        self._count += 1
        var = f"__dsdfg_trace_t{self._count}"
        self._open[key] = var
        stream.write(f"const double {var} = distsdfg_trace::now();")

    def _end(self, stream: CodeIOStream, key, kind: int, name: str) -> None:
        var = self._open.pop(key, None)
        if var is not None:
            stream.write(f"distsdfg_trace::record({kind}, {var}, {_literal(name)});")

    def on_sdfg_begin(self, sdfg, local_stream, global_stream, codegen=None, *args):
        global_stream.write(_RECORDER)
        node = sdfg.parent_nsdfg_node
        if sdfg.instrument == TRACE and node is not None:    # a library node's expansion: its function's body
            self._count += 1            # (DaCe calls on_sdfg_end for the top-level SDFG only)
            name = event_name(node.label, source_of(None, node))
            local_stream.write(f"distsdfg_trace::Scope __dsdfg_trace_s{self._count}({KERNEL}, {_literal(name)});")

    def on_scope_entry(self, *args):
        node, stream = _arg(args, nodes.MapEntry), _arg(args, CodeIOStream)
        if node is not None and node.map.instrument == TRACE:
            self._begin(stream, ("map", id(node.map)))

    def on_scope_exit(self, *args):
        node, state, stream = _arg(args, nodes.MapExit), _arg(args, SDFGState), _arg(args, CodeIOStream)
        if node is not None and node.map.instrument == TRACE:
            entry = state.entry_node(node)
            self._end(stream, ("map", id(node.map)), KERNEL, event_name(node.map.label, source_of(state, entry)))

    def on_node_begin(self, *args):
        node, stream = _arg(args, nodes.CodeNode), _arg(args, CodeIOStream)
        if node is not None and node.instrument == TRACE:
            self._begin(stream, ("node", id(node)))

    def on_node_end(self, *args):
        node, state, stream = _arg(args, nodes.CodeNode), _arg(args, SDFGState), _arg(args, CodeIOStream)
        if node is not None and node.instrument == TRACE:
            self._end(stream, ("node", id(node)), NODE, event_name(node.label, source_of(state, node)))


def _inside_map(sdfg: SDFG) -> bool:
    """Whether a nested SDFG runs inside a map of an enclosing SDFG (once per iteration)."""
    while sdfg.parent_nsdfg_node is not None:
        if sdfg.parent.entry_node(sdfg.parent_nsdfg_node) is not None:
            return True
        sdfg = sdfg.parent_sdfg
    return False


def _kernels(sdfg: SDFG, steps: Callable[[nodes.Node], bool]) -> Iterator:
    """(state, node) of every top-level map and library node that runs on the CPU, and of the steps."""
    for sd in sdfg.all_sdfgs_recursive():
        if _inside_map(sd):
            continue
        for state in sd.states():
            for node in state.nodes():
                if state.entry_node(node) is not None:
                    continue
                if steps(node) or isinstance(node, nodes.LibraryNode):
                    yield state, node
                elif isinstance(node, nodes.MapEntry) and node.map.schedule not in dtypes.GPU_SCHEDULES:
                    yield state, node


@contextlib.contextmanager
def traced(sdfg: SDFG, steps: Callable[[nodes.Node], bool]):
    """While open, ``sdfg``'s kernels (top-level CPU maps, library nodes) and the nodes ``steps``
    accepts are marked with ``TRACE``: code generated from it records their events. A library
    node's expansion takes the mark over (``expand_marked``)."""
    marked, libraries = [], []
    for _, node in _kernels(sdfg, steps):
        if isinstance(node, nodes.LibraryNode):     # no instrumentation property of their own
            setattr(node, MARK, True)
            libraries.append(node)
            continue
        owner = node.map if isinstance(node, nodes.MapEntry) else node
        marked.append((owner, owner.instrument))
        owner.instrument = TRACE
    try:
        yield sdfg
    finally:
        for owner, before in marked:
            owner.instrument = before
        for node in libraries:
            delattr(node, MARK)


def is_marked(node: nodes.LibraryNode) -> bool:
    """Whether ``traced`` marked the library node ``node``: its expansion records its events."""
    return bool(getattr(node, MARK, False))


def expand_marked(sdfg: SDFG, keep: Callable[[nodes.Node], bool]) -> SDFG:
    """Expand the library nodes of ``sdfg`` marked by ``traced`` (except those ``keep`` accepts,
    whose own expansion passes the mark on) until none is left, and mark what replaced each: a
    library node again, a tasklet, or the nested SDFG itself (DaCe's expansion does not carry a
    node's instrumentation over)."""
    while True:
        found = [(sd, state, n) for sd in sdfg.all_sdfgs_recursive() for state in sd.states() for n in state.nodes()
                 if isinstance(n, nodes.LibraryNode) and is_marked(n) and not keep(n)]
        if not found:
            return sdfg
        for sd, state, node in found:
            before = set(state.nodes())
            node.expand(sd, state)
            for new in set(state.nodes()) - before:
                if isinstance(new, nodes.CodeNode) and source_line(None, new) is None:
                    new.debuginfo = node.debuginfo      # the user's line of the node it replaced
                if isinstance(new, nodes.LibraryNode):
                    setattr(new, MARK, True)
                elif isinstance(new, nodes.NestedSDFG):
                    new.sdfg.instrument = TRACE
                elif isinstance(new, nodes.CodeNode):
                    new.instrument = TRACE


def library_symbol(compiled, name: str):
    """(address of the exported symbol ``name`` in a DaCe ``CompiledSDFG``'s library, the library's
    path), or None where the library is not loaded or lacks it."""
    lib = getattr(compiled, "_lib", None)
    try:
        addr = lib._stub.get_symbol(lib._lib, ctypes.c_char_p(name.encode()))
    except AttributeError:
        return None
    return (int(addr), lib._library_filename) if addr else None


def take_events(compiled) -> List[Event]:
    """The events a compiled program recorded since the last call, in order (emptied); [] when it
    was built without the trace."""
    try:
        take = compiled._lib.get_symbol("__distsdfg_trace_take", ctypes.c_longlong)
    except (KeyError, AttributeError, ReferenceError):
        return []
    n = take(None, ctypes.c_longlong(0))
    buf = ctypes.create_string_buffer(n + 1)
    take(buf, ctypes.c_longlong(n + 1))
    out = []
    for line in buf.value.decode("ascii", "replace").splitlines():
        kind, t0, t1, name = line.split("\t", 3)
        out.append(Event(int(kind), float(t0), float(t1), name))
    return out


def remove_report_folder(folder: str) -> None:
    """DaCe saves an (empty) instrumentation report of an instrumented program in its build's
    ``perf`` folder at every call: without the folder it writes nothing."""
    perf = os.path.join(folder, "perf")
    if os.path.isdir(perf) and not os.listdir(perf):
        os.rmdir(perf)
