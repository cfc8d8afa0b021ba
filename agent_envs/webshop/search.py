"""BM25 product search tuned to behave like upstream WebShop's Lucene index.

Upstream indexes one document per product with pyserini (Lucene BM25, k1 = 0.9, b = 0.4,
English analyzer) and shows the top 50 hits.  We use ``bm25s`` with the Lucene scoring
variant and the same parameters, the Porter stemmer (PyStemmer), Lucene's 33 English stop
words and the token pattern ``(?u)\\b\\w+\\b``.  Like Lucene, only documents that match at
least one query term are returned; ties keep catalogue order (Lucene breaks ties by doc id).

Example:
    >>> idx = SearchIndex(["red running shoes", "blue coffee table", "running socks"])
    >>> idx.search("running shoe", top_k=50)
    [0, 2]
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

__all__ = ["LUCENE_STOP_WORDS", "TOKEN_PATTERN", "SearchIndex", "tokenize"]

#: Lucene's classic English stop-word set (EnglishAnalyzer.ENGLISH_STOP_WORDS_SET), 33 words.
LUCENE_STOP_WORDS: frozenset[str] = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)
TOKEN_PATTERN = r"(?u)\b\w+\b"
_TOKEN_RE = re.compile(TOKEN_PATTERN)
logger = logging.getLogger(__name__)


def _bm25s():
    """``bm25s``, imported without its import-time change to the caller's logging: bm25s sets its
    logger to DEBUG, so every index printed a DEBUG line wherever the root logger has a handler.
    The level the caller's process had before the import is put back (NOTSET unless the
    caller set one); a process that imported bm25s itself keeps whatever it has."""
    if "bm25s" in sys.modules:
        return sys.modules["bm25s"]
    log = logging.getLogger("bm25s")
    before = log.level
    import bm25s

    log.setLevel(before)
    return bm25s


@lru_cache(maxsize=1)
def _stemmer():
    import Stemmer

    return Stemmer.Stemmer("porter")


def tokenize(text: str) -> list[str]:
    """Lower-case, split on ``(?u)\\b\\w+\\b``, drop Lucene stop words, Porter-stem."""
    words = [w for w in _TOKEN_RE.findall(text.lower()) if w not in LUCENE_STOP_WORDS]
    # the Porter stemmer maps a few one-letter words ("s") to "": drop those
    return [t for t in _stemmer().stemWords(words) if t] if words else []


class SearchIndex:
    """A BM25 index over documents, returning document positions best first.

    Args:
        documents: Document texts (already assembled; they are lower-cased here).
        k1: BM25 k1 (upstream Lucene setting 0.9).
        b: BM25 b (upstream Lucene setting 0.4).
    """

    def __init__(self, documents: Sequence[str], k1: float = 0.9, b: float = 0.4) -> None:
        bm25s = _bm25s()
        start = time.perf_counter()
        self.size = len(documents)
        # csc_backend "numpy": the same index whether or not scipy is installed (bm25s would
        # otherwise pick scipy when present; the scores are identical, the server image has no scipy)
        self._retriever = bm25s.BM25(method="lucene", k1=k1, b=b, csc_backend="numpy")
        corpus = [tokenize(d) or [""] for d in documents]
        if self.size:
            self._retriever.index(corpus, show_progress=False)
        logger.info("BM25 search index over %d documents built in %.2f s", self.size, time.perf_counter() - start)

    def search(self, query: str, top_k: int = 50) -> list[int]:
        """Positions of the top ``top_k`` documents with a positive score, best first."""
        if not self.size:
            return []
        vocab = self._retriever.vocab_dict
        tokens = [t for t in tokenize(query) if t in vocab]
        if not tokens:
            return []
        scores = np.asarray(self._retriever.get_scores(tokens), dtype=np.float64)
        positive = np.flatnonzero(scores > 0)
        if positive.size == 0:
            return []
        if positive.size > 4 * top_k:
            cut = -np.partition(-scores[positive], top_k - 1)[top_k - 1]
            positive = positive[scores[positive] >= cut]  # keep every tie at the cut
        # stable sort on (-score, position): ties keep catalogue (doc id) order
        order = np.lexsort((positive, -scores[positive]))
        return [int(i) for i in positive[order][:top_k]]
