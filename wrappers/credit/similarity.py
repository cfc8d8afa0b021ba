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
decision ratio ≥ τ is computed exactly but faster: only distinct strings are compared (each
pair at most once); the character-count bound 2·Σ_c min(n_a(c), n_b(c))/(|a| + |b|) (difflib's
``quick_ratio``, which also caps ``real_quick_ratio``'s length bound) rules a representative
out before any matching; when one string is a prefix of the other, difflib's M is the
shorter length; otherwise difflib's matching blocks are found from all pairs of equal
characters at once (numpy, :class:`_Matcher`), and the block recursion stops as soon as M is
known to reach, or not to reach, the threshold.  The clusters are exactly those of calling
``SequenceMatcher(None, a, b).ratio() >= τ`` on every pair (the tests and
``bench/credit_similarity.py`` check this against difflib).

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

from wrappers.credit.base import CreditInputError

__all__ = ["check_similarity", "cluster_texts"]


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
        """Whether M(a, b) reaches the least M with 2·M/(|a| + |b|) ≥ τ (difflib's float)."""
        a, b = texts.texts[x], self.b
        total = len(a) + len(b)
        need = max(0, math.ceil(tau * total / 2) - 2)
        while 2.0 * need / total < tau:
            need += 1
        if a.startswith(b) or b.startswith(a):
            # difflib's first block is then the whole shorter string: any longest run in it
            # also lies on the main diagonal, at the same or an earlier (i, j)
            return min(len(a), len(b)) >= need
        pairs = self.pairs(texts.dense[x])
        found, queue, slack = 0, [(0, len(a), 0, len(b))], min(len(a), len(b))
        while queue:
            alo, ahi, blo, bhi = queue.pop()
            slack -= min(ahi - alo, bhi - blo)
            i, j, k = _longest(a, b, pairs, alo, ahi, blo, bhi)
            found += k
            if found >= need:
                return True
            if k and alo < i and blo < j:
                queue.append((alo, i, blo, j))
                slack += min(i - alo, j - blo)
            if k and i + k < ahi and j + k < bhi:
                queue.append((i + k, ahi, j + k, bhi))
                slack += min(ahi - i - k, bhi - j - k)
            if found + slack < need:
                return False
        return found >= need


def _longest(a: str, b: str, pairs: tuple[np.ndarray, ...], alo: int, ahi: int, blo: int, bhi: int
             ) -> tuple[int, int, int]:
    """difflib's ``find_longest_match(alo, ahi, blo, bhi)`` (no junk function) from the pairs."""
    i, j, d, run = pairs
    besti, bestj, k = alo, blo, 0
    lo, hi = np.searchsorted(i, (alo, ahi)).tolist()  # the pairs are in (i, j) order
    jr = j[lo:hi]
    inside = np.flatnonzero((jr >= blo) & (jr < bhi)) + lo
    if inside.size:
        im = i[inside]
        length = im - np.maximum(np.maximum(run[inside], alo), blo - d[inside]) + 1
        p = int(length.argmax())  # the first longest run in (i, j) order: difflib's choice
        k = int(length[p])
        besti, bestj = int(im[p]) - k + 1, int(j[inside[p]]) - k + 1
    back = _common_suffix(a, besti, b, bestj, min(besti - alo, bestj - blo))
    besti, bestj, k = besti - back, bestj - back, k + back
    k += _common_prefix(a, besti + k, b, bestj + k, min(ahi - besti - k, bhi - bestj - k))
    return besti, bestj, k


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
    """Greedy clusters of distinct texts: per text the first representative it matches."""
    if tau >= 1.0 or len(texts) < 2:  # ratio 1 only for equal strings
        return list(range(len(texts))), len(texts)
    group = _Texts(texts)
    reps: list[int] = []
    rep_counts = np.zeros((len(texts), group.width), dtype=np.int64)
    labels = []
    for x in range(len(texts)):
        k = _first_match(group, x, reps, rep_counts, tau)
        if k < 0:
            k = len(reps)
            rep_counts[k] = group.counts[x]
            reps.append(x)
        labels.append(k)
    return labels, len(reps)


def _first_match(group: _Texts, x: int, reps: list[int], rep_counts: np.ndarray, tau: float) -> int:
    """The first representative text ``x`` matches, or -1: only those whose character-count
    bound 2·Σ_c min(n_a(c), n_b(c))/(|a| + |b|) ≥ τ (difflib's ``quick_ratio``, an upper bound
    of the ratio) are matched exactly."""
    if not reps:
        return -1
    n = len(reps)
    total = group.lengths[x] + group.lengths[reps]
    bound = 2.0 * np.minimum(rep_counts[:n], group.counts[x]).sum(axis=1) / total
    for k in np.flatnonzero(bound >= tau).tolist():
        if group.ratio_at_least(x, reps[k], tau):
            return k
    return -1


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
