"""BM25 search: Lucene-style analysis and scores against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent_envs.webshop.search import LUCENE_STOP_WORDS, SearchIndex, tokenize


def test_analysis_lowercases_drops_stop_words_and_stems():
    assert len(LUCENE_STOP_WORDS) == 33
    assert tokenize("The Running Shoes for MEN, in 2 sizes!") == ["run", "shoe", "men", "2", "size"]
    assert tokenize("the and of") == []
    assert tokenize("s") == []  # Porter stems 's' to '', which is dropped


def test_bm25_lucene_scores_by_hand():
    docs = ["red shoes", "red shoes for running in the park today", "blue table"]
    idx = SearchIndex(docs)
    # idf(shoe) = ln(1 + (N - df + 0.5) / (df + 0.5)) = ln(1 + 1.5 / 2.5) = ln 1.6
    # doc lengths after analysis: 2, 5 (red shoe run park today), 2 -> avgdl 3
    # Lucene BM25 (k1 0.9, b 0.4): idf * tf / (tf + k1 (1 - b + b dl / avgdl))
    idf = math.log(1.6)
    s0 = idf * 1 / (1 + 0.9 * (0.6 + 0.4 * 2 / 3))
    s1 = idf * 1 / (1 + 0.9 * (0.6 + 0.4 * 5 / 3))
    scores = np.asarray(idx._retriever.get_scores(tokenize("shoes")))
    assert scores == pytest.approx([s0, s1, 0.0], rel=1e-5)
    # only documents with a positive score are hits (Lucene returns no non-matching docs)
    assert idx.search("shoes") == [0, 1]
    assert idx.search("unknownword") == [] and idx.search("the") == [] and idx.search("S") == []


def test_ties_keep_catalogue_order_and_top_k():
    docs = ["lamp"] * 120
    idx = SearchIndex(docs)
    assert idx.search("lamp", top_k=50) == list(range(50))
