"""DaCe 1.0.2 Python-frontend workarounds (part of the ``dace_compat`` layer) for large generated
programs: ``fast_parse()`` parses with three changes that give the same SDFG faster.

* **Batched renames.** At the end of parsing a ``@dace.program``, DaCe's
  ``ProgramVisitor.parse_program`` renames every transient to the Python variable it was assigned
  to, one ``SDFG.replace_dict`` call per variable. Each call walks the whole SDFG (every state,
  node, memlet and descriptor), so a program with ``n`` statements costs ``O(n^2)``: the generated
  program of a 2-layer GPT training step (~400 kernels) spent 88% of its ~11 minute parse there.
  The renames are collected while a program is parsed and applied in one ``replace_dict`` call
  when ``parse_program`` returns. They are independent (each maps a DaCe temporary to a Python
  name that is not an array yet, and a temporary is renamed at most once), so one simultaneous
  replacement gives the same SDFG. Only the calls made directly by ``parse_program`` are
  deferred; ``SDFG.replace`` of return values runs as before.
* **The visitor's defined names** (``ProgramVisitor.defined``, read a few times per statement)
  are collected with the SDFG's dictionaries looked up once per call, not once per variable
  (most of its time was DaCe's property getters): the same dictionary, in the same order.
* **The descriptors' symbols in ``SDFGState.symbols_defined_at``**, which memlet propagation
  asks for every memlet path it adds and which collects the free symbols of every descriptor of
  the SDFG each time (a quadratic cost in the number of arrays), are remembered per SDFG while
  its descriptors are the same objects (the remembered entry keeps them alive, so no new one can
  take an old one's identity). The frontend changes a descriptor's shape only right after
  creating it (``add_temp_transient_like``, before any memlet is added), so a new descriptor
  always means a fresh computation.

tests/test_torch_parse.py compares the SDFGs parsed with and without ``fast_parse``.
"""
from __future__ import annotations

import contextlib
import sys
import threading

__all__ = ["batched_renames", "fast_parse"]

_lock = threading.Lock()
_lock_patches = threading.Lock()


def _symbol_renames(sdfg, batch):
    """The renames as symbols, only for the names some expression uses as a symbol (a renamed
    array is rarely one); sympy's ``subs`` costs time per entry of the mapping."""
    from dace import symbolic
    used = {str(s) for s in sdfg.used_symbols(all_symbols=True)}
    symrepl = {symbolic.pystr_to_symbolic(k): symbolic.pystr_to_symbolic(v) for k, v in batch.items() if k in used}
    # An empty mapping makes DaCe build the full one; a mapping of an unused name is a no-op.
    return symrepl or {symbolic.symbol("__distsdfg_unused"): symbolic.symbol("__distsdfg_unused")}


@contextlib.contextmanager
def batched_renames():
    from dace.frontend.python import newast
    from dace.sdfg import SDFG

    visitor = newast.ProgramVisitor
    original_parse, original_replace = visitor.parse_program, SDFG.replace_dict
    pending = {}          # id(sdfg) -> {old: new}, for the parses in progress

    def replace_dict(self, repldict, symrepl=None, replace_in_graph=True, replace_keys=True):
        batch = pending.get(id(self))
        if (batch is not None and symrepl is None and replace_in_graph and replace_keys
                and sys._getframe(1).f_code is original_parse.__code__):
            for old, new in repldict.items():
                batch.setdefault(old, new)
            # Later checks of this loop look the names up in the arrays: keep them current.
            for old, new in repldict.items():
                if old in self._arrays and '.' not in old:
                    self._arrays[new] = self._arrays.pop(old)
            return
        return original_replace(self, repldict, symrepl, replace_in_graph, replace_keys)

    def parse_program(self, program, is_tasklet=False):
        key = id(self.sdfg)
        if is_tasklet or key in pending:
            return original_parse(self, program, is_tasklet)
        pending[key] = batch = {}
        try:
            result = original_parse(self, program, is_tasklet)
        finally:
            del pending[key]
        if batch:
            sdfg = self.sdfg
            # Put the descriptors back under their old names; replace_dict moves them itself.
            for old, new in batch.items():
                if new in sdfg._arrays and old not in sdfg._arrays:
                    sdfg._arrays[old] = sdfg._arrays.pop(new)
            original_replace(sdfg, batch, _symbol_renames(sdfg, batch))
        return result

    with _lock:
        visitor.parse_program, SDFG.replace_dict = parse_program, replace_dict
        try:
            yield
        finally:
            visitor.parse_program, SDFG.replace_dict = original_parse, original_replace


def _defined(self):
    """``ProgramVisitor.defined`` (DaCe 1.0.2): names visible to the statement being parsed, later
    sources overriding earlier ones, with the SDFG's dictionaries looked up once."""
    from dace import symbolic
    sdfg = self.sdfg
    arrays, symbols, grids = sdfg.arrays, sdfg.symbols, sdfg.process_grids
    scope_arrays, variables = self.scope_arrays, self.variables
    result = {k: v for k, v in self.globals.items() if isinstance(v, symbolic.symbol)}
    scope_vars = list(self.scope_vars.items())
    var_items = list(variables.items())
    result.update((k, arrays[v]) for k, v in scope_vars if v in arrays)
    result.update((k, scope_arrays[v]) for k, v in scope_vars if v in scope_arrays)
    result.update((k, arrays[v]) for k, v in var_items if v in arrays)
    result.update((v, arrays[v]) for _, v in var_items if v in arrays)
    result.update((k, symbols[v]) for k, v in var_items if v in symbols)
    result.update(arrays)
    result.update((k, grids[v]) for k, v in var_items if v in grids)
    try:
        from mpi4py import MPI
        result.update((k, v) for k, v in self.globals.items() if isinstance(v, MPI.Comm))
    except ImportError:
        pass
    return result


def _remembered_descriptor_symbols(defined_at):
    """``SDFGState.symbols_defined_at`` (DaCe 1.0.2) with the descriptors' free symbols remembered
    per SDFG while its descriptors are the same objects (see the module's docstring)."""
    import collections
    memo = {}

    def descriptor_symbols(sdfg):
        descs = tuple(sdfg.arrays.values())
        ids = tuple(map(id, descs))
        entry = memo.get(id(sdfg))
        if entry is None or entry[0] is not sdfg or entry[2] != ids:
            pairs = [(str(s), s.dtype) for desc in descs for s in desc.free_symbols]
            entry = memo[id(sdfg)] = (sdfg, descs, ids, pairs)
        return entry[3]

    def symbols_defined_at(self, node):
        if node is None:
            return collections.OrderedDict()
        sdfg = self.sdfg
        symbols = collections.OrderedDict(sdfg.symbols)
        symbols.update(descriptor_symbols(sdfg))
        try:
            transitions = sdfg.predecessor_state_transitions(sdfg.start_state)
            for e in transitions:
                symbols.update(e.data.new_symbols(sdfg, symbols))
        except ValueError:          # no start state yet: every inter-state edge, as DaCe does
            for e in sdfg.edges():
                symbols.update(e.data.new_symbols(sdfg, symbols))
        return with_enclosing_scopes(self, node, symbols)
    return symbols_defined_at


def enclosing_scopes(state, node) -> list:
    """The scope entries around ``node`` in ``state``, innermost first."""
    parents = state.scope_dict()
    scopes = []
    while parents[node] is not None:
        node = parents[node]
        scopes.append(node)
    return scopes


def with_enclosing_scopes(state, node, symbols, scopes=None):
    """``symbols`` (the SDFG-wide part of ``SDFGState.symbols_defined_at``) updated in place,
    outermost scope first, with the symbols each scope entry around ``node`` defines, as DaCe
    1.0.2's function does; returns ``symbols``."""
    for scope in reversed(enclosing_scopes(state, node) if scopes is None else scopes):
        symbols.update(scope.new_symbols(state.sdfg, state, symbols))
    return symbols


@contextlib.contextmanager
def fast_parse():
    """Batched renames, the visitor's defined names and the descriptors' symbols as described in
    the module's docstring; DaCe's originals are restored on exit."""
    from dace.frontend.python import newast
    from dace.sdfg import state as _state
    visitor = newast.ProgramVisitor
    with batched_renames(), _lock_patches:
        old_defined, old_at = visitor.defined, _state.SDFGState.symbols_defined_at
        visitor.defined = property(_defined)
        _state.SDFGState.symbols_defined_at = _remembered_descriptor_symbols(old_at)
        try:
            yield
        finally:
            visitor.defined, _state.SDFGState.symbols_defined_at = old_defined, old_at
