"""The user's source line of a kernel, read off DaCe's DebugInfo (``heat.py:17 Tn[1:-1, 1:-1] = ...``)."""
from __future__ import annotations

import dataclasses
import linecache
import os
from typing import Optional

import dace
from dace.sdfg import SDFGState, nodes

__all__ = ["SourceLine", "source_line", "source_of", "named"]

#: Lines longer than this are cut, with ``...``, where they are shown beside a map's name.
WIDTH = 60

#: Files whose lines are never the user's: DaCe's and distsdfg's own (a node they add records
#: the line of the library function that added it), but for distsdfg's test programs.
_INTERNAL = (os.path.dirname(os.path.abspath(dace.__file__)) + os.sep,
             os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep)
_PROGRAMS = os.path.join(_INTERNAL[1], "testing") + os.sep


@dataclasses.dataclass(frozen=True, slots=True)
class SourceLine:
    """A line of the user's program: ``str`` gives ``file.py:LINE text``, the text cut at ``WIDTH``.

    >>> str(SourceLine("/home/me/heat.py", 17, "Tn[1:-1, 1:-1] = 0.25 * (T[:-2, 1:-1] + T[2:, 1:-1])"))
    'heat.py:17 Tn[1:-1, 1:-1] = 0.25 * (T[:-2, 1:-1] + T[2:, 1:-1])'
    """
    file: str
    line: int
    text: str = ""

    @property
    def where(self) -> str:
        """``file.py:LINE``."""
        return f"{os.path.basename(self.file)}:{self.line}"

    def __str__(self) -> str:
        text = self.text if len(self.text) <= WIDTH else self.text[:WIDTH - 3].rstrip() + "..."
        return f"{self.where} {text}".rstrip()


def _user_line(info) -> Optional[SourceLine]:
    """The line a DebugInfo names when it is in the user's own file (not DaCe's or ours)."""
    if info is None or not getattr(info, "filename", None) or not getattr(info, "start_line", 0):
        return None
    path = os.path.abspath(info.filename)
    if (path.startswith(_INTERNAL) and not path.startswith(_PROGRAMS)) or info.filename.startswith("<"):
        return None
    text = linecache.getline(info.filename, int(info.start_line)).strip()
    return SourceLine(info.filename, int(info.start_line), text)


def source_line(state: Optional[SDFGState], node: nodes.Node) -> Optional[SourceLine]:
    """Where the user wrote ``node`` (a map entry, library node or tasklet); None when DaCe kept
    no line of the user's file. A map that DaCe or distsdfg made (an array copy turned into a map)
    takes the line of the arrays it writes, else of those it reads."""
    info = node.map.debuginfo if isinstance(node, nodes.MapEntry) else getattr(node, "debuginfo", None)
    found = _user_line(info)
    if found is not None or state is None:
        return found
    last = state.exit_node(node) if isinstance(node, nodes.MapEntry) else node
    around = [e.dst for e in state.out_edges(last)] + [e.src for e in state.in_edges(node)]
    for n in around:
        if isinstance(n, nodes.AccessNode):
            found = _user_line(n.debuginfo)
            if found is not None:
                return found
    return None


def source_of(state: Optional[SDFGState], node: nodes.Node) -> str:
    """``str(source_line(state, node))``, or '' when there is none."""
    found = source_line(state, node)
    return str(found) if found is not None else ""


def named(key: str, source: str, what: str = "map") -> str:
    """How errors and reports name a map: ``map `_Sub__map_2` (heat.py:17 d = Tn - T)``."""
    return f"{what} `{key}` ({source})" if source else f"{what} `{key}`"
