"""``rename_symbols``: DaCe's ``SDFG.replace_dict`` for renaming symbols and data, element by element.

DaCe 1.0.2's ``replace_dict`` hands the whole replacement dictionary to every node, data
descriptor and memlet, and its symbolic helper (``dace.sdfg.replace._internal_replace``) prints
every key of the dictionary to a string to filter it, for every dimension of every subset: the
cost is ``O(|mapping| x |SDFG|)``. ``optimize.share_rank_symbols`` renames a few hundred rank
symbols in a program of a few thousand nodes (the training step of a small GPT), which was
most of the lowering's time; ``boundary.BoundarySteps.place_arguments`` renames two data
containers per argument placed on the ranks (a ZeRO-1 training step places a few hundred), one
``replace_dict`` each: three quarters of that step's lowering.

``rename_symbols`` walks the same elements DaCe's ``replace_dict`` walks (the data descriptors,
the interstate edges, every node and memlet of the top-level states; not nested SDFGs, which
DaCe does not enter either) and calls the same DaCe functions on each, but with the part of the
mapping whose names the element mentions (for a memlet: the free symbols of its subsets and
volume and the data it moves). The names an element mentions are over-approximated
(every identifier of a string or code block, every free symbol of an expression), so no element
misses a replacement; an element that mentions none still gets DaCe's call (with an empty
mapping) where DaCe's call changes it regardless (numbers in symbolic properties become sympy
numbers), and a memlet that mentions none is left alone, as DaCe leaves it. The result is the
one ``replace_dict`` gives when no new name is also an old one (no chains, so the order of the
substitutions does not matter); otherwise this falls back to ``replace_dict``.
"""
from __future__ import annotations

import importlib
import re
from typing import Dict, Set

import sympy
from dace import properties, subsets, symbolic
from dace.properties import CodeBlock
from dace.sdfg import SDFG, SDFGState

__all__ = ["rename_symbols", "rename_data"]

_replace = importlib.import_module("dace.sdfg.replace")     # ``dace.sdfg.replace`` is also a function
_sdfg_mod = importlib.import_module("dace.sdfg.sdfg")

_TOKEN = re.compile(r"\w+")
_HANDLED = (properties.SymbolicProperty, properties.DataProperty, properties.RangeProperty,
            properties.ShapeProperty, properties.CodeProperty)


def _names(value, out: Set[str]) -> None:
    """Add every name ``value`` may mention to ``out`` (a superset: identifiers of strings too)."""
    if value is None or isinstance(value, (bool, int, float)):
        return
    if isinstance(value, sympy.Basic):
        for s in value.free_symbols:
            name = getattr(s, "name", None)
            if isinstance(name, str):
                out.add(name)
            out.update(_TOKEN.findall(str(s)) if not isinstance(s, sympy.Symbol) else ())
        return
    if isinstance(value, str):
        out.update(_TOKEN.findall(value))
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            _names(v, out)
    elif isinstance(value, dict):
        for k, v in value.items():
            _names(k, out)
            _names(v, out)
    elif isinstance(value, subsets.Range):
        _names(value.ranges, out)
    elif isinstance(value, CodeBlock):
        out.update(_TOKEN.findall(value.as_string or ""))
    else:
        out.update(_TOKEN.findall(str(value)))


def _element_names(obj) -> Set[str]:
    """Names in the properties of ``obj`` that DaCe's ``replace_properties_dict`` rewrites."""
    out: Set[str] = set()
    for prop, val in obj.properties():
        if val is None:
            continue
        if isinstance(prop, _HANDLED) or (isinstance(prop, properties.DictProperty)
                                          and prop.attr_name == "symbol_mapping"):
            _names(val, out)
    return out


def rename_data(sdfg: SDFG, mapping: Dict[str, str]) -> None:
    """``sdfg.replace_dict(mapping)`` for a mapping of data container (or symbol) names, in time
    linear in the SDFG: the descriptors move to their new names, access nodes and memlets follow."""
    rename_symbols(sdfg, mapping)


def rename_symbols(sdfg: SDFG, mapping: Dict[str, str]) -> None:
    """``sdfg.replace_dict(mapping)`` for a mapping of symbol (or data) names, in time linear in the SDFG."""
    if not mapping:
        return
    if (set(mapping) & set(mapping.values()) or not all(isinstance(v, str) for v in mapping.values())
            or any("." in k for k in mapping) or not all(isinstance(b, SDFGState) for b in sdfg.nodes())):
        sdfg.replace_dict(mapping)      # chains, dotted names, nested regions: DaCe's own walk
        return
    symrepl = {symbolic.pystr_to_symbolic(k): symbolic.pystr_to_symbolic(v) for k, v in mapping.items()}
    sym_of = {str(k): k for k in symrepl}
    if set(sym_of) != set(mapping):
        sdfg.replace_dict(mapping)
        return
    keys = set(mapping)

    def part(names):
        hit = keys & names
        return {k: mapping[k] for k in hit}, {sym_of[k]: symrepl[sym_of[k]] for k in hit}

    # The names of arrays and symbols (replace_dict's replace_keys).
    for old, new in mapping.items():
        if _sdfg_mod.validate_name(new):
            _sdfg_mod._replace_dict_keys(sdfg._arrays, old, new)
            _sdfg_mod._replace_dict_keys(sdfg.symbols, old, new)
            _sdfg_mod._replace_dict_keys(sdfg.constants_prop, old, new)
            _sdfg_mod._replace_dict_keys(sdfg.callback_mapping, old, new)
            _sdfg_mod._replace_dict_values(sdfg.callback_mapping, old, new)
    for desc in sdfg.arrays.values():
        _replace.replace_properties_dict(desc, *part(_element_names(desc)))
    for edge in sdfg.edges():
        edge.data.replace_dict(mapping, replace_keys=True)
    for state in sdfg.nodes():
        for node in state.nodes():
            _replace.replace_properties_dict(node, *part(_element_names(node)))
        for edge in state.edges():
            m = edge.data
            names = set()
            for s in (m.subset, m.other_subset):
                if s is not None:
                    names |= s.free_symbols
            _names(m.volume, names)
            if m.data is not None:
                names.add(m.data)
            repl, srepl = part(names)
            if repl:
                _replace.replace_dict(_OneEdge(edge, sdfg), repl, srepl)


class _OneEdge:
    """A subgraph of one edge and no nodes, for ``dace.sdfg.replace.replace_dict`` (DaCe 2.0 reads its ``sdfg``)."""

    def __init__(self, edge, sdfg):
        self._edge = edge
        self.sdfg = sdfg

    def nodes(self):
        return []

    def edges(self):
        return [self._edge]
