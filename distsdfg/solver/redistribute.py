"""Grid-to-grid redistribution: from the blocks ranks hold to the blocks they need (pure, no MPI).

A layout is one box per rank (``None`` for a rank that holds or needs nothing), plus, for the
source, an optional reduction operator: a *partial* source holds per-rank contributions whose
combination by the operator is the array's value (thesis 4.4, partial sums of a split
reduction axis). ``plan_redistribution`` picks the cheapest correct collective for a pair of
layouts and returns a :class:`CommPlan` that both the C++ runtime (through ``encode.encode_step``)
and ``comm_report`` read:

======================  =========================================================================
collective              when
======================  =========================================================================
``local``               every rank already holds what it needs (equal layouts, or replicated
                        data consumed partitioned): a local copy, no MPI call
``Allreduce``           partial sums consumed replicated: ranks holding the same block reduce it
``Reduce_scatter``      partial sums consumed partitioned within each group of equal blocks
``Reduce``              as ``Reduce_scatter`` when one rank per group needs the block
``Allgatherv``          disjoint pieces consumed whole by every member of a group
``Alltoallw``           any other pair of block layouts: each rank receives exactly the boxes it
                        lacks, from one holder each, with MPI subarray types
``Alltoallv``           any other partial layout: every contribution to a needed element is sent
                        to the rank that needs it and combined there with the operator
``Isend/Irecv``         source and destination are one buffer (``inplace``: a halo exchange, or
                        written blocks sent back to their owners): point-to-point messages of
                        MPI subarray types between the ranks concerned only; elements nobody
                        else holds keep their values
======================  =========================================================================
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

from ..geometry.boxes import Box, contains, intersect, normalize, reshape_box, subtract, volume
from ..geometry.boxindex import BoxIndex, any_overlap
from ..errors import UnsupportedProgramError
from ..values.notation import format_placements, placements_of_blocks
from ..values.modes import Collective
from ..values.plan import CommStep

__all__ = ["Box", "Message", "CommPlan", "plan_redistribution", "intersect", "subtract", "contains", "volume",
           "reshape_box"]   # the box algebra lives in distsdfg.geometry.boxes


@dataclasses.dataclass(frozen=True)
class Message:
    """``box`` of the array goes from rank ``src`` to rank ``dst`` (``src == dst``: a local copy)."""
    src: int
    dst: int
    box: Box

    def __str__(self):
        rng = ", ".join(f"{s}:{s + n}" for s, n in zip(*self.box))
        return f"{self.src}->{self.dst} [{rng}]"


@dataclasses.dataclass(frozen=True)
class CommPlan:
    """How one array moves at one kernel boundary, solved for concrete sizes and ranks.

    ``groups`` are the sub-communicators of the group collectives (members in rank order);
    ``pieces`` the box each rank contributes to an Allgatherv; ``messages`` the point-to-point
    boxes of Alltoallw/Alltoallv and the local copies.
    """
    array: str
    collective: Collective         # a Collective or its value
    nranks: int
    itemsize: int
    op: Optional[str]
    src: Tuple[Optional[Box], ...]
    dst: Tuple[Optional[Box], ...]
    groups: Tuple[Tuple[int, ...], ...] = ()
    pieces: Tuple[Optional[Box], ...] = ()
    messages: Tuple[Message, ...] = ()
    #: solved for this rank alone (``plan_redistribution(rank=...)``): ``messages`` are its own
    rank: Optional[int] = None
    #: the process grids of the source and destination layouts (rank q at its row-major
    #: coordinates), when the blocks are the array's own: what ``placements`` reads them on
    src_grid: Tuple[int, ...] = ()
    dst_grid: Tuple[int, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "collective", Collective(self.collective))

    # -- placements -------------------------------------------------------------------------------
    @property
    def placements(self):
        """``(source, destination)`` placements per grid axis (``notation``), or None where the
        grids are not known (a plan solved on its own, or in a refinement of the array's shape)."""
        if not self.src_grid or not self.dst_grid:
            return None
        return (placements_of_blocks(self.src_grid, self.src, self.op), placements_of_blocks(self.dst_grid, self.dst))

    @property
    def change(self) -> str:
        """The placement change this plan makes, e.g. ``'S0R -> RR'`` (an all-gather over the first
        grid axis); empty where ``placements`` is None."""
        p = self.placements
        return "" if p is None else f"{format_placements(p[0])} -> {format_placements(p[1])}"

    # -- bytes ------------------------------------------------------------------------------------
    def traffic(self) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
        """Bytes sent and received per rank by the MPI call (self excluded); see docs/redistribution.md."""
        if self.rank is not None:
            raise ValueError(f"the plan of `{self.array}` was solved for rank {self.rank} alone and holds only its "
                             f"messages; solve it for every rank (rank=None) to price the traffic")
        P, item = self.nranks, self.itemsize
        sent, recv = [0] * P, [0] * P
        c = self.collective
        if c in (Collective.ALLTOALLW, Collective.ALLTOALLV, Collective.P2P):
            for m in self.messages:
                if m.src != m.dst:
                    sent[m.src] += volume(m.box) * item
                    recv[m.dst] += volume(m.box) * item
        for g in self.groups:
            k = len(g)
            if k < 2:
                continue
            if c == Collective.ALLREDUCE:          # reduce-scatter + allgather on an even split of the block
                n = volume(self.src[g[0]])
                for i, q in enumerate(g):
                    piece = n // k + (1 if i < n % k else 0)
                    sent[q] += ((n - piece) + (k - 1) * piece) * item
                    recv[q] += ((k - 1) * piece + (n - piece)) * item
            elif c == Collective.REDUCE_SCATTER:
                whole = sum(volume(self.dst[r]) for r in g)
                for q in g:
                    sent[q] += (whole - volume(self.dst[q])) * item
                    recv[q] += (k - 1) * volume(self.dst[q]) * item
            elif c == Collective.REDUCE:
                root = next(q for q in g if self.dst[q] is not None)
                n = volume(self.dst[root])
                for q in g:
                    if q != root:
                        sent[q] += n * item
                        recv[root] += n * item
            elif c == Collective.ALLGATHERV:
                whole = sum(volume(self.pieces[r]) for r in g)
                for q in g:
                    sent[q] += (k - 1) * volume(self.pieces[q]) * item
                    recv[q] += (whole - volume(self.pieces[q])) * item
        return tuple(sent), tuple(recv)

    @property
    def bytes(self) -> int:
        return sum(self.traffic()[0])

    def comm_steps(self):
        """The MPI calls as CommSteps (none for a local copy)."""
        if self.collective == Collective.LOCAL:
            return []
        sent, recv = self.traffic()
        return [CommStep(self.collective, self.array, sent, recv)]

    def to_json(self) -> str:
        import json
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "CommPlan":
        import json
        d = json.loads(text)

        def box(b):
            return None if b is None else (tuple(b[0]), tuple(b[1]))
        return cls(d["array"], d["collective"], d["nranks"], d["itemsize"], d["op"],
                   tuple(box(b) for b in d["src"]), tuple(box(b) for b in d["dst"]),
                   tuple(tuple(g) for g in d["groups"]), tuple(box(b) for b in d["pieces"]),
                   tuple(Message(m["src"], m["dst"], box(m["box"])) for m in d["messages"]), d.get("rank"),
                   tuple(d.get("src_grid", ())), tuple(d.get("dst_grid", ())))

    def __str__(self):
        what = {Collective.LOCAL: "local copy, no communication",
                Collective.ALLREDUCE: f"Allreduce({self.op}) in {len(self.groups)} group(s) of {_sizes(self.groups)}",
                Collective.REDUCE_SCATTER: f"Reduce_scatter({self.op}) in {len(self.groups)} group(s) of "
                                           f"{_sizes(self.groups)}",
                Collective.REDUCE: f"Reduce({self.op}) in {len(self.groups)} group(s) of {_sizes(self.groups)}",
                Collective.ALLGATHERV: f"Allgatherv in {len(self.groups)} group(s) of {_sizes(self.groups)}",
                Collective.ALLTOALLW: f"Alltoallw of {sum(m.src != m.dst for m in self.messages)} subarray(s)",
                Collective.ALLTOALLV: f"Alltoallv({self.op}) of {sum(m.src != m.dst for m in self.messages)} partial "
                                      f"block(s), combined on arrival",
                Collective.P2P: f"Isend/Irecv of {len(self.messages)} subarray(s) between "
                                f"{len({(m.src, m.dst) for m in self.messages})} rank pair(s), in place"}
        what = what[self.collective]
        change = f" ({self.change})" if self.change else ""
        return f"{self.array}{change}: {what}, {self.bytes:,} bytes"


def _sizes(groups) -> str:
    ks = sorted({len(g) for g in groups})
    return "/".join(str(k) for k in ks) + " rank(s)"


def _groups_by_block(blocks: Sequence[Optional[Box]]) -> Dict[Box, List[int]]:
    out: Dict[Box, List[int]] = {}
    for q, b in enumerate(blocks):
        if b is not None:
            out.setdefault(b, []).append(q)
    return out


def _clean(groups: Dict[Box, List[int]]) -> bool:
    """Distinct blocks are pairwise disjoint (ranks hold either the same block or unrelated ones)."""
    return not any_overlap(list(groups))


def _partial_plan(array, src, dst, op, P, item, rank=None) -> CommPlan:
    base = dict(array=array, nranks=P, itemsize=item, op=op, src=tuple(src), dst=tuple(dst), rank=rank)
    groups = _groups_by_block(src)
    if _clean(groups) and all(d is None or (s is not None and contains(s, d)) for s, d in zip(src, dst)):
        members = sorted(groups.values())
        if all(all(dst[q] == src[q] for q in g) for g in members):
            return CommPlan(collective=Collective.ALLREDUCE, groups=tuple(tuple(g) for g in members), **base)
        if all(sum(dst[q] is not None for q in g) <= 1 for g in members):
            used = [g for g in members if any(dst[q] is not None for q in g)]
            return CommPlan(collective=Collective.REDUCE, groups=tuple(tuple(g) for g in used), **base)
        return CommPlan(collective=Collective.REDUCE_SCATTER, groups=tuple(tuple(g) for g in members), **base)
    index = BoxIndex(src)          # the contributors to each rank's block, without trying all pairs
    if rank is None:
        pairs = [(q, p) for q, d in enumerate(dst) for p in index.hits(d)]
    else:                          # what it receives, and the ranks whose blocks its own contribution meets
        pairs = sorted({(rank, p) for p in index.hits(dst[rank])} | {(q, rank) for q in BoxIndex(dst).hits(src[rank])})
    msgs = [Message(p, q, intersect(src[p], dst[q])) for q, p in pairs]
    return CommPlan(collective=Collective.ALLTOALLV, messages=tuple(msgs), **base)


def _allgather(src, dst) -> Optional[Tuple[List[Tuple[int, ...]], List[Optional[Box]]]]:
    """Sub-groups in which every member needs the same box and holds a disjoint piece of it."""
    P = len(src)
    pieces: List[Optional[Box]] = [None] * P
    out: List[Tuple[int, ...]] = []
    for need, ranks in _groups_by_block(dst).items():
        holders: Dict[Box, List[int]] = {}
        for q in ranks:
            piece = intersect(src[q], need)
            if piece is None:
                return None
            holders.setdefault(piece, []).append(q)
        distinct = list(holders)
        if not _clean(holders) or sum(volume(b) for b in distinct) != volume(need) or len(distinct) < 2:
            return None
        reps = {len(v) for v in holders.values()}
        if len(reps) != 1:
            return None
        for j in range(reps.pop()):
            g = tuple(sorted(holders[b][j] for b in distinct))
            out.append(g)
            for q in g:
                pieces[q] = intersect(src[q], need)
    return out, pieces


def _holders(index, need: Box, q: int, P: int) -> List[int]:
    """Senders tried for receiver ``q``: the nearest ranks after it first, to spread the load.

    Of the ranks that hold one block, only the first after ``q`` can send anything (the others'
    elements are gone from what ``q`` still lacks by their turn), and only blocks that meet
    ``need`` matter, so these are the candidates: the same messages as trying every rank in turn."""
    firsts = {index.first_after(j, q) for j in index.distinct_hits(need)}
    firsts.discard(None)
    return sorted(firsts, key=lambda p: (p - q) % P)


def plan_redistribution(array: str, src: Sequence[Optional[Box]], dst: Sequence[Optional[Box]],
                        op: Optional[str] = None, itemsize: int = 8, inplace: bool = False,
                        rank: Optional[int] = None) -> CommPlan:
    """The cheapest correct way from layout ``src`` (``op``: partial) to layout ``dst``.

    ``inplace``: both layouts are views of one buffer per rank; a rank keeps what it holds and
    receives only the rest of its destination box that some other rank holds.

    ``rank``: solve for that rank only: the plan's ``messages`` are those it sends or receives
    (in the same order as in the whole plan), found from the blocks that meet its own; the
    collective, groups and pieces are the whole plan's. Such a plan drives the runtime on that
    rank but cannot price the others' traffic."""
    src = [normalize(b) for b in src]
    dst = [normalize(b) for b in dst]
    P = len(src)
    if len(dst) != P:
        raise ValueError("source and destination layouts must cover the same ranks")
    if inplace:
        if op is not None:
            raise ValueError("an in-place redistribution cannot combine partial results")
        msgs = tuple(m for m in _fetch(array, src, dst, strict=False, rank=rank) if m.src != m.dst)
        if rank is None:
            moves = bool(msgs)
        else:
            moves = _moves(src, dst)
        return CommPlan(array=array, collective=Collective.P2P if moves else Collective.LOCAL, nranks=P,
                        itemsize=itemsize, op=None, src=tuple(src), dst=tuple(dst), messages=msgs, rank=rank)
    if op is not None and _clean(_groups_by_block(src)) and all(len(g) == 1 for g in _groups_by_block(src).values()):
        op = None          # no element has two contributions: nothing to combine
    if op is not None:
        return _partial_plan(array, src, dst, op, P, itemsize, rank)
    base = dict(array=array, nranks=P, itemsize=itemsize, op=None, src=tuple(src), dst=tuple(dst), rank=rank)
    if all(contains(s, d) for s, d in zip(src, dst)):
        msgs = tuple(Message(q, q, d) for q, d in enumerate(dst) if d is not None and rank in (None, q))
        return CommPlan(collective=Collective.LOCAL, messages=msgs, **base)
    ag = _allgather(src, dst)
    if ag is not None and _covers_all(ag[0], dst):
        return CommPlan(collective=Collective.ALLGATHERV, groups=tuple(ag[0]), pieces=tuple(ag[1]), **base)
    msgs = tuple(_fetch(array, src, dst, strict=True, rank=rank))
    return CommPlan(collective=Collective.ALLTOALLW, messages=msgs, **base)


def _fetch(array, src, dst, strict: bool, rank: Optional[int] = None) -> List[Message]:
    """Messages that give every rank its destination box: its own part locally, the rest from one
    holder each (the nearest ranks after it first). ``strict``: every needed element must be held.

    ``rank``: only the messages it sends or receives: its own fetch, and the fetches of the ranks
    whose destination boxes meet its source block."""
    P = len(src)
    index = BoxIndex(src)
    # Distinct source blocks that share no element (grid layouts): a holder's pieces are its
    # block's intersections with what the receiver lacks, whatever the other holders send; no need
    # to cut what is left into ever smaller boxes after each holder.
    disjoint = not any_overlap(list(index.distinct))
    receivers = range(P)
    if rank is not None:
        if strict and not _covered(index, dst):     # raise on every rank alike, with the whole solve's message
            return _fetch(array, src, dst, strict)
        receivers = sorted(set(BoxIndex(dst).hits(src[rank])) | {rank})
    msgs: List[Message] = []
    for q in receivers:
        need = dst[q]
        if need is None:
            continue
        own = intersect(src[q], need)
        if own is not None:
            msgs.append(Message(q, q, own))
        rest = subtract(need, src[q])
        holders = _holders(index, need, q, P) if rest else []
        if rank is not None and q != rank:
            if rank not in holders:
                continue                # another rank's fetch in which this rank sends nothing
            holders = holders[:holders.index(rank) + 1]      # what it sends is known once it is reached
        if disjoint:
            lacking = sum(volume(b) for b in rest)
            for p in holders:
                for b in rest:
                    piece = intersect(b, src[p])
                    if piece is not None:
                        msgs.append(Message(p, q, piece))
                        lacking -= volume(piece)
            if lacking == 0 or not strict or rank not in (None, q):
                continue            # otherwise the cut below finds what no rank holds, and raises
        for p in holders:
            if not rest:
                break
            nxt: List[Box] = []
            for b in rest:
                piece = intersect(b, src[p])
                if piece is None:
                    nxt.append(b)
                    continue
                msgs.append(Message(p, q, piece))
                nxt.extend(subtract(b, piece))
            rest = nxt
        if rest and strict and rank in (None, q):
            raise UnsupportedProgramError(
                f"`{array}`: rank {q} needs elements {rest[0]} that no rank holds after the previous kernel; "
                f"schedule the producer so that it writes every element its consumers read")
    if rank is not None:
        msgs = [m for m in msgs if rank in (m.src, m.dst)]
    msgs.sort(key=lambda m: (m.src, m.dst))
    return msgs


def _covered(index, dst) -> bool:
    """Every element of every destination box is held by some rank of the indexed source layout."""
    for need in BoxIndex(dst).distinct:
        rest = [need]
        for j in index.distinct_hits(need):
            rest = [piece for b in rest for piece in subtract(b, index.distinct[j])]
            if not rest:
                break
        if rest:
            return False
    return True


def _moves(src, dst) -> bool:
    """Whether an in-place redistribution sends anything: some rank lacks part of its destination
    box that another rank holds (what ``_fetch`` would make a message of)."""
    index = BoxIndex(src)
    for q, need in enumerate(dst):
        rest = subtract(need, src[q]) if need is not None else []
        for j in index.distinct_hits(need) if rest else ():
            if index.first_after(j, q) is not None and any(intersect(b, index.distinct[j]) for b in rest):
                return True
    return False


def _covers_all(groups, dst) -> bool:
    inside = {q for g in groups for q in g}
    return all(d is None or q in inside for q, d in enumerate(dst))
