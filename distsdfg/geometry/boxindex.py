"""Which of many boxes meet a given box, without comparing every pair.

The solver asks, for every rank, which other ranks' blocks meet its own (the holders of what a
rank needs, the contributors to its partial sums, whether two blocks overlap). Comparing all
pairs costs P x P box tests per step (153 s for the matrix chain at P=4096). A ``BoxIndex``
keeps the distinct boxes of a layout sorted per dimension and answers a query in time close to
the number of boxes it meets: per dimension, the intervals that meet the query's are a slice of
the sorted starts (found by bisection, widened by the longest interval), and the boxes are then
looked up by their interval in every dimension (blocks of a grid) or, when that product would be
larger, filtered from the dimension with the fewest candidates.
"""
from __future__ import annotations

import bisect
import itertools
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["BoxIndex", "any_overlap"]

Box = Tuple[Tuple[int, ...], Tuple[int, ...]]


def _meet(a: Box, b: Box) -> bool:
    return all(x < y + m and y < x + n for x, n, y, m in zip(a[0], a[1], b[0], b[1]))


class BoxIndex:
    """An index of ``boxes`` (one per rank, ``None`` for none; non-empty boxes only)."""

    def __init__(self, boxes: Sequence[Optional[Box]]):
        self.boxes = list(boxes)
        self.members: Dict[Box, List[int]] = {}
        for i, b in enumerate(self.boxes):
            if b is not None:
                self.members.setdefault(b, []).append(i)
        self.distinct: List[Box] = list(self.members)
        self.nd = len(self.distinct[0][0]) if self.distinct else 0
        self._dims = []
        keys: List[List[int]] = [[] for _ in self.distinct]
        for d in range(self.nd):
            ivs = sorted({(b[0][d], b[1][d]) for b in self.distinct})
            pos = {iv: k for k, iv in enumerate(ivs)}
            by_iv: List[List[int]] = [[] for _ in ivs]
            for j, b in enumerate(self.distinct):
                k = pos[(b[0][d], b[1][d])]
                keys[j].append(k)
                by_iv[k].append(j)
            self._dims.append((ivs, [iv[0] for iv in ivs], max(iv[1] for iv in ivs), by_iv))
        self._cells = {tuple(k): j for j, k in enumerate(keys)}

    def _intervals(self, d: int, a: int, n: int) -> List[int]:
        """Indices of dimension ``d``'s distinct intervals that meet [a, a + n)."""
        ivs, starts, longest, _ = self._dims[d]
        lo = bisect.bisect_right(starts, a - longest)
        hi = bisect.bisect_left(starts, a + n)
        return [k for k in range(lo, hi) if ivs[k][0] + ivs[k][1] > a]

    def distinct_hits(self, box: Optional[Box]) -> List[int]:
        """Indices (into ``distinct``, ascending) of the distinct boxes that meet ``box``."""
        if box is None or not self.distinct:
            return []
        lists = [self._intervals(d, box[0][d], box[1][d]) for d in range(self.nd)]
        if any(not ks for ks in lists):
            return []
        product = 1
        for ks in lists:
            product *= len(ks)
        sizes = [sum(len(self._dims[d][3][k]) for k in ks) for d, ks in enumerate(lists)]
        if not sizes or product <= min(sizes):
            out = [self._cells[t] for t in itertools.product(*lists) if t in self._cells]
        else:
            d = sizes.index(min(sizes))
            by_iv = self._dims[d][3]
            out = [j for k in lists[d] for j in by_iv[k] if _meet(self.distinct[j], box)]
        out.sort()
        return out

    def hits(self, box: Optional[Box]) -> List[int]:
        """The ranks whose box meets ``box``, ascending."""
        return sorted(i for j in self.distinct_hits(box) for i in self.members[self.distinct[j]])

    def separated(self) -> bool:
        """Whether, in every dimension, the distinct intervals are pairwise disjoint (blocks of a
        grid): then two distinct boxes differ, and so are disjoint, in some dimension."""
        for ivs, _, _, _ in self._dims:
            for (a, n), (b, _) in zip(ivs, ivs[1:]):
                if a + n > b:
                    return False
        return True

    def first_after(self, j: int, q: int) -> Optional[int]:
        """The first holder of distinct box ``j`` after rank ``q`` in cyclic order (never ``q``)."""
        ranks = self.members[self.distinct[j]]
        k = bisect.bisect_right(ranks, q)
        p = ranks[k] if k < len(ranks) else ranks[0]
        return None if p == q else p


def any_overlap(boxes: Sequence[Optional[Box]]) -> bool:
    """Whether two of ``boxes`` (non-empty ones; equal boxes of two ranks included) share an element."""
    index = BoxIndex(boxes)
    if any(len(r) > 1 for r in index.members.values()):
        return True
    if index.separated():
        return False
    return any(len(index.distinct_hits(b)) > 1 for b in index.distinct)
