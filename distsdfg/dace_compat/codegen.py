"""Adapter (DaCe 1.0.2, SymPy 1.14): DaCe's code generation and SDFG serialisation without the work
they repeat on a large program.

A lowered program in distributed placement (a GPT training step: ~1,000 arrays at the top level,
hundreds of nested SDFGs) spends most of its build in two places that do the same work many times:

* SymPy's printing of subset expressions. ``SDFG.to_json`` (``program.sdfg``, and the hash DaCe
  takes of every nested SDFG for ``compiler.unique_functions``) prints every memlet's subset, about
  125,000 ``str()`` calls of which fewer than 3,000 are of distinct expressions.
* ``SDFGState.symbols_defined_at``, which the tasklet code generator calls for every tasklet and
  which collects the free symbols of every data descriptor of the tasklet's SDFG each time.

``fast_codegen()`` is a context in which both are remembered: SymPy's ``str`` of an expression by
the expression (SymPy 1.14 expressions compare equal only if they print the same, ``Float`` and
``Integer`` included; strings that contain a ``.``, as those of ``Float``s do, are not kept, so
that Floats of different precisions never share a string), and the part of ``symbols_defined_at``
that depends on the SDFG only (its symbols, its descriptors' free symbols, its inter-state
edges'), by the SDFG, its number of symbols and of descriptors. The generated code and the JSON are
the same as without it (tests/test_codegen_cache.py compares them).
"""
from __future__ import annotations

import collections
import contextlib
import threading

from distsdfg.dace_compat.parse import enclosing_scopes, with_enclosing_scopes

__all__ = ["fast_codegen"]

_lock = threading.RLock()
_depth = 0


@contextlib.contextmanager
def fast_codegen():
    """Within this context, SymPy's ``str`` of an expression and the SDFG-wide part of
    ``SDFGState.symbols_defined_at`` are computed once per expression and per SDFG (see the
    module's docstring); both are restored on exit. Nested uses share the outermost one's caches."""
    global _depth
    with _lock:
        if _depth:
            _depth += 1
            try:
                yield
            finally:
                _depth -= 1
            return
        from dace.sdfg import state as _state
        from sympy.core import _print_helpers
        printable = _print_helpers.Printable
        old_str, old_defined = printable.__str__, _state.SDFGState.symbols_defined_at
        printable.__str__ = _remembered_str(old_str)
        _state.SDFGState.symbols_defined_at = _shared_symbols_defined_at(old_defined)
        _depth = 1
        try:
            yield
        finally:
            _depth = 0
            printable.__str__ = old_str
            _state.SDFGState.symbols_defined_at = old_defined


def _remembered_str(print_one):
    """SymPy's ``Printable.__str__`` that remembers each expression's string by the expression."""
    strings = {}

    def __str__(self):
        key = (type(self), self)
        try:
            return strings[key]
        except KeyError:
            pass
        except TypeError:           # an unhashable printable: not remembered
            return print_one(self)
        text = print_one(self)
        if "." not in text:
            strings[key] = text
        return text
    return __str__


def _shared_symbols_defined_at(defined_at):
    """``SDFGState.symbols_defined_at`` with the part every node of an SDFG shares computed once.

    That part is what DaCe's own function returns for a node outside any scope (nothing is added
    for scopes); a node inside scopes gets a copy of it updated, outermost scope first, with the
    symbols each enclosing scope entry defines, as DaCe's function does."""
    shared = {}

    def symbols_defined_at(self, node, **given):
        if node is None or given:        # DaCe 2.0's state_symbols=...: its own function
            return defined_at(self, node, **given)
        scopes = enclosing_scopes(self, node)
        sdfg = self.sdfg
        key = (id(sdfg), len(sdfg.symbols), len(sdfg.arrays))
        entry = shared.get(key)
        if entry is None or entry[0] is not sdfg:
            entry = shared[key] = (sdfg, defined_at(self, scopes[-1] if scopes else node))
        return with_enclosing_scopes(self, node, collections.OrderedDict(entry[1]), scopes)
    return symbols_defined_at
