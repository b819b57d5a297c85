"""DaCe 1.0.2 Python-frontend workaround (part of the ``dace_compat`` layer): batched renames.

At the end of parsing a ``@dace.program``, DaCe's ``ProgramVisitor.parse_program`` renames
every transient to the Python variable it was assigned to, one ``SDFG.replace_dict`` call per
variable. Each call walks the whole SDFG (every state, node, memlet and descriptor), so a
program with ``n`` statements costs ``O(n^2)``: the generated program of a 2-layer GPT
training step (~400 kernels) spent 88% of its ~11 minute parse there.

``batched_renames()`` collects those renames while a program is parsed and applies them in
one ``replace_dict`` call when ``parse_program`` returns. The renames are independent (each
maps a DaCe temporary to a Python name that is not an array yet, and a temporary is renamed
at most once), so one simultaneous replacement gives the same SDFG. Only the calls made
directly by ``parse_program`` are deferred; ``SDFG.replace`` of return values runs as before.
"""
from __future__ import annotations

import contextlib
import sys
import threading

__all__ = ["batched_renames"]

_lock = threading.Lock()


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
