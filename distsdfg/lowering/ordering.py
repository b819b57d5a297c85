"""Empty edges that order a rank-0 step before the nodes that must see its result, through the
views and library nodes that DaCe 1.0.2 allows no extra edges on."""
from __future__ import annotations

from typing import List

import dace
from dace import data as dt
from dace.sdfg import SDFGState, nodes

__all__ = ["order_before", "writers_through_view"]


def writers_through_view(state: SDFGState, node: nodes.Node) -> List[nodes.Node]:
    """What must wait for rank 0's copy before ``node``: ``node`` itself, or, where ``node`` is a view
    written by other nodes (``Z = __return.reshape(1, 36)`` written by an einsum), those writers: an
    ordering edge into the view alone let the gather run after the einsum wrote through it."""
    if not isinstance(node, nodes.AccessNode) or not isinstance(node.desc(state.sdfg), dt.View) \
            or state.in_degree(node) == 0:
        return [node]
    out = []
    for e in state.in_edges(node):
        src = e.src
        out.append(state.entry_node(src) if isinstance(src, nodes.ExitNode) else src)
    return list(dict.fromkeys(out))


def order_before(state: SDFGState, target: nodes.AccessNode, node: nodes.Node) -> None:
    """An empty edge that makes ``node`` run after ``target`` is written."""
    feeders = [e.src for e in state.in_edges(node) if isinstance(e.src, nodes.AccessNode)]
    if isinstance(node, nodes.LibraryNode) and feeders:
        # Library nodes validate their connectors: order through their inputs instead.
        # A view has one edge, to or from its array: order through that array's node
        # (correlation's ``data[:, i] @ data[:, i + 1:M]``: an extra edge into the view
        # of ``data`` made it ambiguous, and DaCe rejected the SDFG).
        for f in dict.fromkeys(_through_views(state, f) for f in feeders):
            state.add_nedge(target, f, dace.Memlet())
    else:
        state.add_nedge(target, node, dace.Memlet())


def _through_views(state: SDFGState, node: nodes.AccessNode) -> nodes.AccessNode:
    """The access node a read view takes its data from (``node`` itself when it is no view)."""
    while isinstance(node.desc(state.sdfg), dt.View) and state.in_degree(node) == 1 \
            and isinstance(state.in_edges(node)[0].src, nodes.AccessNode):
        node = state.in_edges(node)[0].src
    return node
