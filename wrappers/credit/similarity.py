"""Similarity-merged states: verl-agent's ``enable_similarity`` / ``similarity_thresh``.

GiGPO and GraphGPO group step rows by their anchor state ``Step.state_key`` (verl-agent's
``anchor_obs``: the observation text without history).  Text that differs by a word (a
counter, an advert, a reordered list) splits one situation into several singleton groups.
With a threshold τ in (0, 1] the states of one episode group are instead clustered greedily:

* the similarity of a new state a to a cluster's representative b is
  ``difflib.SequenceMatcher(None, a, b).ratio()`` = 2·M / (|a| + |b|), M the number of
  characters in difflib's matching blocks (with its autojunk heuristic on strings over 200
  characters; the ratio is not symmetric, a is the new state, b the representative);
* the distinct states are visited in order of first appearance; each joins the **first**
  cluster (in order of creation) whose representative it matches with ratio **≥ τ**, else it
  opens a new cluster whose representative it is.  A representative is never replaced, so
  membership is not transitive;
* equal states always share a cluster (only distinct strings are compared), so the merge
  only coarsens exact grouping, and τ = 1 is exact grouping.  (verl-agent compares every row
  with the representatives; that gives the same clusters whenever difflib's ratio of a string
  with itself is 1, as it is for ordinary text.)

Clustering is quadratic in a group's distinct states, and ``difflib`` is pure Python, so the
decision ratio ≥ τ is computed exactly but faster.  Only distinct strings are compared (each
pair at most once).  Two upper bounds of difflib's M rule a representative out before any
matching: the character-count bound Σ_c min(n_a(c), n_b(c)) (difflib's ``quick_ratio``, for all
pairs of the group in one matrix product) and the longest common subsequence (rapidfuzz's
``LCSseq``; difflib's blocks are a common subsequence).  When one string is a prefix of the
other, difflib's M is the shorter length.  Otherwise difflib's matching blocks are found from
all pairs of equal characters at once (numpy, :class:`_Matcher`; small ranges by difflib's own
loop), and the block recursion stops as soon as M is known to reach the threshold (the blocks
found plus, when b has no popular characters, the longer of the common prefix and suffix of
every range left) or not to reach it (the blocks found plus the shorter side of every range
left).  The clusters are exactly those of calling ``SequenceMatcher(None, a, b).ratio() >= τ``
on every pair (the tests and ``bench/credit_similarity.py`` check this against difflib).

Example (one word differs: "1" vs "2" in 30 characters; M = 29, ratio = 58/60 ≈ 0.967):
    >>> cluster_texts(["You are at desk 1. It is dark.", "You are at desk 2. It is dark.", "A shelf."], 0.95)
    ([0, 0, 1], 2)
    >>> cluster_texts(["You are at desk 1. It is dark.", "You are at desk 2. It is dark.", "A shelf."], 0.99)
    ([0, 1, 2], 3)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
from rapidfuzz.distance import LCSseq

from wrappers.credit.base import CreditInputError

__all__ = ["check_similarity", "cluster_texts"]

#: Ranges of at most this many (i, j) pairs are searched by a plain loop (:func:`_longest_small`).
SMALL_RANGE = 64


def check_similarity(value: Any) -> float | None:
    """``None`` (exact states) or a threshold in (0, 1] as a float.

    Raises:
        ValueError: a bool, a non-number or a threshold outside (0, 1] (NaN included).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(  # noqa: TRY004  (one ValueError for every bad threshold)
            f"similarity must be None or a threshold in (0, 1] such as 0.95, got {value!r}")
    tau = float(value)
    if not 0.0 < tau <= 1.0:
        raise ValueError(f"similarity must be a threshold in (0, 1] (ratio >= threshold merges), got {value!r}")
    return tau


def _dense_codes(codes: np.ndarray) -> np.ndarray:
    """Code points renumbered 0..A-1 in increasing order (A distinct ones)."""
    if codes.size and int(codes.max()) < 1 << 17:
        present = np.zeros(int(codes.max()) + 1, dtype=np.int64)
        present[codes] = 1
        return (np.cumsum(present) - 1)[codes]
    return np.unique(codes, return_inverse=True)[1].reshape(-1).astype(np.int64)


class _Texts:
    """The distinct texts of one group as arrays: dense character codes (over the group's
    alphabet), lengths and character counts."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)
        self.lengths = np.array([len(t) for t in self.texts], dtype=np.int64)
        flat = np.frombuffer("".join(self.texts).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        dense = _dense_codes(flat)
        self.width = int(dense.max()) + 1 if dense.size else 1
        bounds = np.concatenate([[0], np.cumsum(self.lengths)])
        self.dense = [dense[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]
        owner = np.repeat(np.arange(len(self.texts)), self.lengths)
        #: Character counts of every text (rows) over the group's alphabet.
        self.counts = np.bincount(owner * self.width + dense, minlength=len(self.texts) * self.width
                                  ).reshape(len(self.texts), self.width)
        self._matchers: dict[int, _Matcher] = {}

    def ratio_at_least(self, x: int, rep: int, tau: float) -> bool:
        """Whether ``SequenceMatcher(None, texts[x], texts[rep]).ratio() >= tau``."""
        m = self._matchers.get(rep)
        if m is None:
            m = self._matchers[rep] = _Matcher(self, rep)
        return m.ratio_at_least(self, x, tau)


class _Matcher:
    """difflib's matching of any text against one representative b, vectorised.

    ``SequenceMatcher(None, a, b).ratio()`` is 2·M/(|a| + |b|), M the total size of the
    matching blocks found recursively: in a range, the longest run of equal characters whose
    characters of b are not *popular* (with ``autojunk``, for |b| ≥ 200: occurring more than
    |b|//100 + 1 times), the first one in (i, j) order, extended over equal characters on both
    ends; then the same left and right of it.  Here the runs come from all (i, j) pairs of
    equal non-popular characters at once (numpy), and the recursion stops as soon as M is
    decided against the threshold; the blocks, and so M, are difflib's.
    """

    def __init__(self, texts: _Texts, rep: int) -> None:
        self.b = texts.texts[rep]
        dense = texts.dense[rep]
        count = texts.counts[rep].copy()
        if dense.size >= 200:  # difflib's autojunk: popular characters start no match
            count[count > dense.size // 100 + 1] = 0
        keep = np.flatnonzero(count[dense] > 0)
        self.pos = keep[np.argsort(dense[keep], kind="stable")]  # b's positions, by character then position
        self.start = np.cumsum(count) - count
        self.count = count
        #: No popular characters: difflib's longest match in a range is its longest common substring.
        self.exact_longest = bool(np.array_equal(count, texts.counts[rep]))

    def pairs(self, dense: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """All (i, j) with a[i] == b[j] non-popular, in (i, j) order, their diagonal j − i and
        the first i of the run of such pairs each belongs to (on its diagonal)."""
        cnt = self.count[dense]
        n = int(cnt.sum())
        i = np.repeat(np.arange(dense.size), cnt)
        first = np.repeat(self.start[dense] - (np.cumsum(cnt) - cnt), cnt)
        j = self.pos[first + np.arange(n)]
        d = j - i
        shifted = d + dense.size  # >= 1; small ints sort by radix
        order = np.argsort(shifted.astype(np.int16) if shifted.size and shifted.max() < 2**15 else shifted,
                           kind="stable")  # by diagonal, then i (stable: pairs come in i order)
        io, do = i[order], d[order]
        cut = np.ones(n, dtype=bool)
        cut[1:] = (do[1:] != do[:-1]) | (io[1:] != io[:-1] + 1)  # a run continues at (i + 1, j + 1)
        head = np.maximum.accumulate(np.where(cut, np.arange(n), 0))
        run = np.empty(n, dtype=np.int64)
        run[order] = io[head]
        return i, j, d, run

    def ratio_at_least(self, texts: _Texts, x: int, tau: float) -> bool:
        """Whether M(a, b) reaches the least M with 2·M/(|a| + |b|) ≥ τ (difflib's float).

        Exact, with two early exits: ``slack`` (the shorter side of every range still to
        search, an upper bound of what they can add) rejects, and, when b has no popular
        characters, ``sure`` accepts: the longest match in a range is then its longest common
        substring, at least as long as the range's common prefix and its common suffix."""
        a, b = texts.texts[x], self.b
        need = _needed(len(a), len(b), tau)
        if a.startswith(b) or b.startswith(a):
            # difflib's first block is then the whole shorter string: any longest run in it
            # also lies on the main diagonal, at the same or an earlier (i, j)
            return min(len(a), len(b)) >= need
        if LCSseq.similarity(a, b, score_cutoff=need) < need:
            return False  # the matching blocks are a common subsequence: M ≤ LCS(a, b)
        pairs: tuple[np.ndarray, ...] = ()
        found, queue, slack, sure = 0, [], 0, 0

        def push(alo: int, ahi: int, blo: int, bhi: int) -> None:
            nonlocal slack, sure
            lb = _sure(a, b, alo, ahi, blo, bhi) if self.exact_longest else 0
            queue.append((alo, ahi, blo, bhi, lb))
            slack += min(ahi - alo, bhi - blo)
            sure += lb

        push(0, len(a), 0, len(b))
        while queue:
            alo, ahi, blo, bhi, lb = queue.pop()
            slack -= min(ahi - alo, bhi - blo)
            sure -= lb
            if self.exact_longest and (ahi - alo) * (bhi - blo) <= SMALL_RANGE:
                i, j, k = _longest_small(a, b, alo, ahi, blo, bhi)
            else:
                pairs = pairs or self.pairs(texts.dense[x])
                i, j, k = _longest(a, b, pairs, alo, ahi, blo, bhi)
            found += k
            if k and alo < i and blo < j:
                push(alo, i, blo, j)
            if k and i + k < ahi and j + k < bhi:
                push(i + k, ahi, j + k, bhi)
            if found + sure >= need:
                return True
            if found + slack < need:
                return False
        return found >= need


def _needed(la: int, lb: int, tau: float) -> int:
    """The least M with difflib's float 2·M/(la + lb) ≥ τ."""
    total = la + lb
    need = max(0, math.ceil(tau * total / 2) - 2)
    while 2.0 * need / total < tau:
        need += 1
    return need


def _sure(a: str, b: str, alo: int, ahi: int, blo: int, bhi: int) -> int:
    """A lower bound of the longest common substring of a[alo:ahi] and b[blo:bhi]: the
    longer of their common prefix and common suffix."""
    limit = min(ahi - alo, bhi - blo)
    return max(_common_prefix(a, alo, b, blo, limit), _common_suffix(a, ahi, b, bhi, limit))


def _longest(a: str, b: str, pairs: tuple[np.ndarray, ...], alo: int, ahi: int, blo: int, bhi: int
             ) -> tuple[int, int, int]:
    """difflib's ``find_longest_match(alo, ahi, blo, bhi)`` (no junk function) from the pairs."""
    i, j, d, run = pairs
    besti, bestj, k = alo, blo, 0
    if alo == blo == 0 and ahi == len(a) and bhi == len(b):  # the whole strings: every pair
        if i.size:
            length = i - run + 1
            p = int(length.argmax())
            k = int(length[p])
            besti, bestj = int(i[p]) - k + 1, int(j[p]) - k + 1
        return _extend(a, b, alo, ahi, blo, bhi, besti, bestj, k)
    lo, hi = np.searchsorted(i, (alo, ahi)).tolist()  # the pairs are in (i, j) order
    jr = j[lo:hi]
    inside = np.flatnonzero((jr >= blo) & (jr < bhi)) + lo
    if inside.size:
        im = i[inside]
        length = im - np.maximum(np.maximum(run[inside], alo), blo - d[inside]) + 1
        p = int(length.argmax())  # the first longest run in (i, j) order: difflib's choice
        k = int(length[p])
        besti, bestj = int(im[p]) - k + 1, int(j[inside[p]]) - k + 1
    return _extend(a, b, alo, ahi, blo, bhi, besti, bestj, k)


def _extend(a: str, b: str, alo: int, ahi: int, blo: int, bhi: int, besti: int, bestj: int, k: int
            ) -> tuple[int, int, int]:
    """difflib's extension of the best run over equal (popular) characters on both ends."""
    back = _common_suffix(a, besti, b, bestj, min(besti - alo, bestj - blo))
    besti, bestj, k = besti - back, bestj - back, k + back
    k += _common_prefix(a, besti + k, b, bestj + k, min(ahi - besti - k, bhi - bestj - k))
    return besti, bestj, k


def _longest_small(a: str, b: str, alo: int, ahi: int, blo: int, bhi: int) -> tuple[int, int, int]:
    """difflib's ``find_longest_match`` when nothing is junk or popular, by its own loop over
    all (i, j) (for ranges of at most :data:`SMALL_RANGE` pairs, where numpy's overhead
    exceeds the work): the first longest run of equal characters in (end i, j) order."""
    besti, bestj, best = alo, blo, 0
    prev: dict[int, int] = {}
    for i in range(alo, ahi):
        ai, cur = a[i], {}
        for j in range(blo, bhi):
            if b[j] == ai:
                k = cur[j] = prev.get(j - 1, 0) + 1
                if k > best:
                    besti, bestj, best = i - k + 1, j - k + 1, k
        prev = cur
    return besti, bestj, best


def _common_prefix(a: str, i: int, b: str, j: int, limit: int) -> int:
    """Length of the common prefix of a[i:] and b[j:], at most ``limit`` (galloping slices)."""
    if limit <= 0 or a[i] != b[j]:
        return 0
    lo, hi = 1, limit + 1  # a[i:i+lo] == b[j:j+lo]; hi: the least length known to differ (or past limit)
    step = 2
    while step < hi and a[i:i + step] == b[j:j + step]:
        lo, step = step, step * 2
    hi = min(hi, step)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[i:i + mid] == b[j:j + mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _common_suffix(a: str, i: int, b: str, j: int, limit: int) -> int:
    """Length of the common suffix of a[:i] and b[:j], at most ``limit``."""
    if limit <= 0 or a[i - 1] != b[j - 1]:
        return 0
    lo, hi = 1, limit + 1
    step = 2
    while step < hi and a[i - step:i] == b[j - step:j]:
        lo, step = step, step * 2
    hi = min(hi, step)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[i - mid:i] == b[j - mid:j]:
            lo = mid
        else:
            hi = mid
    return lo


def _cluster_distinct(texts: Sequence[str], tau: float) -> tuple[list[int], int]:
    """Greedy clusters of distinct texts: per text the first representative it matches.

    Only representatives whose character-count bound 2·Σ_c min(n_a(c), n_b(c))/(|a| + |b|)
    reaches τ (difflib's ``quick_ratio``, an upper bound of the ratio) are matched exactly;
    the bound is computed for every pair at once."""
    if tau >= 1.0 or len(texts) < 2:  # ratio 1 only for equal strings
        return list(range(len(texts))), len(texts)
    group = _Texts(texts)
    candidate = _quick_bounds(group) >= tau
    reps = np.zeros(len(texts), dtype=np.intp)
    n_reps = 0
    labels = []
    for x in range(len(texts)):
        k = next((int(k) for k in np.flatnonzero(candidate[x, reps[:n_reps]])
                  if group.ratio_at_least(x, int(reps[k]), tau)), -1)
        if k < 0:
            k, reps[n_reps] = n_reps, x
            n_reps += 1
        labels.append(k)
    return labels, n_reps


def _quick_bounds(group: _Texts) -> np.ndarray:
    """difflib's ``quick_ratio`` of every pair of the group's texts (rows a, columns b).

    Σ_c min(n_a(c), n_b(c)) as one matrix product: each text's counts in unary (a column per
    character c and level t < max count of c, 1 where n(c) > t), whose dot products count the
    levels both texts reach (integers, exact in float32 below 2**24)."""
    top = group.counts.max(axis=0)
    char = np.repeat(np.arange(group.width), top)
    level = np.arange(char.size) - np.repeat(np.cumsum(top) - top, top)
    exact = np.float32 if group.lengths.max(initial=0) < 1 << 24 else np.float64
    unary = (group.counts[:, char] > level).astype(exact)
    common = (unary @ unary.T).astype(np.float64)
    total = group.lengths[:, None] + group.lengths[None, :]
    return 2.0 * common / np.maximum(total, 1)


def cluster_texts(texts: Sequence[Hashable], threshold: float) -> tuple[list[int], int]:
    """Greedy similarity clusters of ``texts`` (module docstring): per item its cluster
    (clusters numbered in order of creation) and the number of clusters.

    Raises:
        CreditInputError: an item that is not a ``str`` (the message names its position).
    """
    tau = check_similarity(threshold)
    distinct: dict[Hashable, int] = {}
    index = []
    for i, text in enumerate(texts):
        x = distinct.get(text)
        if x is None:
            if not isinstance(text, str):
                raise CreditInputError(f"similarity merging compares text states; item {i} is a "
                                       f"{type(text).__name__}: {text!r:.80}")
            x = distinct[text] = len(distinct)
        index.append(x)
    labels, n = _cluster_distinct(list(distinct), tau)
    return [labels[x] for x in index], n
