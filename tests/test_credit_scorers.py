"""SCPO scorers (SPEC §4.5): lexical fallback, packaged MiniLM bi-encoder, local cross-encoder."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rubrics.trajectory import Step, Trajectory
from wrappers.credit.scorers import (
    BiEncoderScorer,
    CrossEncoderScorer,
    LexicalScorer,
    PairScorer,
    check_scorer_spec,
    default_bi_encoder_path,
    make_scorer,
)
from wrappers.credit.scpo import SCPO


# --- lexical ----------------------------------------------------------------------------------
def test_lexical_hand_values() -> None:
    s = LexicalScorer()
    got = s.score_pairs(
        [
            ("a b", "b c"),  # counts (a1 b1)·(b1 c1) = 1; norms √2·√2 -> 0.5
            ("a a b", "a b"),  # (2·1 + 1·1)/(√5·√2) = 3/√10
            ("Open Fridge 1", "open fridge 1"),  # case-insensitive, identical words -> 1
            ("x y", "z"),  # nothing shared -> 0
            ("", ""),  # two empty texts -> 1
            ("", "a"),  # empty vs text -> 0
        ]
    )
    np.testing.assert_allclose(got, [0.5, 3 / math.sqrt(10), 1.0, 0.0, 1.0, 0.0])


def test_lexical_matrices_match_pairs_and_shapes() -> None:
    s = LexicalScorer()
    rows, cols = ["go to desk 1", "take key 1", "open drawer"], ["take key 1", "go to shelf 2"]
    (m,) = s.score_matrices([(rows, cols)])
    assert m.shape == (3, 2)
    np.testing.assert_allclose(m.ravel(), s.score_pairs([(a, b) for a in rows for b in cols]))
    assert m[1, 0] == 1.0  # identical text: exactly 1
    empty = s.score_matrices([([], cols), (rows, [])])
    assert [e.shape for e in empty] == [(0, 2), (3, 0)]
    with pytest.raises(TypeError, match="request 0 rows"):
        s.score_matrices([([1], ["a"])])


class CountingScorer(PairScorer):
    """Records every pair it is asked to score (through the base class's batching)."""

    name = "counting"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str]] = []

    def score_pairs(self, pairs):
        self.calls += 1
        self.seen.extend(pairs)
        return np.array([len(a) / (len(a) + len(b)) for a, b in pairs])


def test_base_class_batches_distinct_pairs_in_one_call() -> None:
    s = CountingScorer()
    req = [(["a", "bb"], ["a", "bb"]), (["a", "bb"], ["ccc", "a"]), (["a"], ["a"])]
    mats = s.score_matrices(req)
    # distinct pairs: 4 from the first request, ("a","ccc") and ("bb","ccc") new from the second
    assert s.calls == 1 and len(s.seen) == len(set(s.seen)) == 6
    np.testing.assert_allclose(mats[1], [[1 / 4, 1 / 2], [2 / 5, 2 / 3]])  # len(a)/(len(a)+len(b))


# --- specs ----------------------------------------------------------------------------------
def test_specs() -> None:
    assert isinstance(make_scorer("lexical"), LexicalScorer)
    s = LexicalScorer()
    assert make_scorer(s) is s
    assert isinstance(make_scorer("bi-encoder"), BiEncoderScorer)
    assert isinstance(make_scorer("auto"), BiEncoderScorer)  # both packages are installed here
    for bad in ("magic", "lexical:x", "cross-encoder", "auto:/x"):
        with pytest.raises(ValueError, match="unknown scorer spec"):
            check_scorer_spec(bad)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        make_scorer("cross-encoder:/no/such/model")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        BiEncoderScorer("/no/such/dir")
    assert default_bi_encoder_path().joinpath("config.json").is_file()


def test_scorers_import_no_torch() -> None:
    code = (
        "import sys; from wrappers.credit.scorers import make_scorer; "
        "s = make_scorer('bi-encoder'); import wrappers.credit.scpo; "
        "print(','.join(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# --- the packaged MiniLM bi-encoder (real model) -----------------------------------------------
@pytest.fixture(scope="module")
def bi() -> BiEncoderScorer:
    import torch

    torch.set_num_threads(1)
    return BiEncoderScorer()


@pytest.mark.slow
def test_bi_encoder_matches_sentence_transformers(bi: BiEncoderScorer) -> None:
    from sentence_transformers import SentenceTransformer

    a, b = "go to fridge 1 ‖ The fridge 1 is closed.", "open fridge 1 ‖ You open the fridge 1."
    got = bi.score_pairs([(a, b), (a, a)])
    model = SentenceTransformer(str(default_bi_encoder_path()), device="cpu")
    e = model.encode([a, b], normalize_embeddings=True)
    assert got[0] == pytest.approx(float(np.dot(e[0], e[1])), abs=1e-5)
    assert got[1] == 1.0
    # semantics: a related step scores above an unrelated one
    rel, unrel = bi.score_pairs(
        [
            ("take apple 1 from table 1", "pick up the apple 1 from table 1"),
            ("take apple 1 from table 1", "search[blue cotton t-shirt]"),
        ]
    )
    assert rel > unrel and 0.0 <= unrel <= 1.0


@pytest.mark.slow
def test_bi_encoder_one_call_per_batch_and_cache(bi: BiEncoderScorer) -> None:
    calls = bi.calls
    rows = ["go to desk 1", "take key 1 from desk 1", "go to desk 1"]
    cols = ["go to desk 2", "take key 1 from desk 1"]
    mats = bi.score_matrices([(rows, cols), (rows, rows)])
    assert bi.calls == calls + 1  # one encode call for the whole batch
    np.testing.assert_allclose(
        mats[0], bi.score_pairs([(a, b) for a in rows for b in cols]).reshape(3, 2)
    )
    assert mats[0][1, 1] == 1.0 and mats[1].shape == (3, 3)
    np.testing.assert_allclose(mats[1], mats[1].T)
    bi.score_matrices([(cols, rows)])  # every text already embedded
    assert bi.calls == calls + 1


@pytest.mark.slow
def test_scpo_with_default_scorer(bi: BiEncoderScorer) -> None:
    win = Trajectory(
        "t",
        0,
        [
            Step("s0", "go to desk 1", feedback="On the desk 1, you see a key 1."),
            Step("s1", "take key 1 from desk 1", feedback="You pick up the key 1.", reward=10.0),
        ],
        score=1.0,
        success=True,
    )
    loss = Trajectory(
        "t",
        1,
        [
            Step("s0", "go to desk 1", feedback="On the desk 1, you see a key 1."),
            Step("s2", "go to shelf 3", feedback="On the shelf 3, you see nothing."),
        ],
        score=0.0,
    )
    est = SCPO(scorer=bi, order="chronological")
    (tr,) = est.traces([[win, loss]])[0]
    # the identical first step scores exactly 1 and claims reference position 0 with credit 1
    assert tr.position[0] == 0 and tr.credit[0] == 1.0
    r = est([[win, loss]])[0]
    assert r.shaped_rewards[1][0] == pytest.approx(0.5)


# --- a tiny random cross-encoder saved locally -------------------------------------------------
@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory) -> Path:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(
        str(default_bi_encoder_path())
    )  # a real BERT word-piece vocab
    cfg = BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=128,
        num_labels=1,
    )
    path = tmp_path_factory.mktemp("tiny_cross_encoder")
    BertForSequenceClassification(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.mark.slow
def test_cross_encoder_path(tiny_cross_encoder: Path) -> None:
    from sentence_transformers import CrossEncoder

    s = make_scorer(f"cross-encoder:{tiny_cross_encoder}")
    assert isinstance(s, CrossEncoderScorer)
    pairs = [
        ("go to desk 1", "open drawer 2"),
        ("take key 1", "take key 1"),
        ("go to desk 1", "open drawer 2"),
    ]
    got = s.score_pairs(pairs)
    ref = CrossEncoder(str(tiny_cross_encoder), device="cpu").predict([list(p) for p in pairs[:2]])
    np.testing.assert_allclose(got[:2], ref, atol=1e-6)  # sigmoid of the single logit, in [0, 1]
    assert np.all((got >= 0) & (got <= 1)) and got[0] == got[2]
    assert s.calls == 1
    # batch: one predict call, only for pairs not scored before
    mats = s.score_matrices([(["go to desk 1", "take key 1"], ["open drawer 2", "look"])])
    assert s.calls == 2 and mats[0].shape == (2, 2) and mats[0][0, 0] == got[0]
    s.score_matrices([(["take key 1"], ["take key 1", "look"])])
    assert s.calls == 2  # all cached
    # the cross-encoder drives SCPO end to end
    win = Trajectory(
        "t", 0, [Step("s0", "go to desk 1", feedback="ok", reward=10.0)], score=1.0, success=True
    )
    loss = Trajectory("t", 1, [Step("s0", "look", feedback="ok")], score=0.0)
    r = SCPO(scorer=s, theta=0.0)([[win, loss]])[0]  # θ = 0: any score claims position 0
    m = s.score_pairs([("go to desk 1 \u2016 ok", "look \u2016 ok")])[0]
    assert r.shaped_rewards[1][0] == pytest.approx(0.5 * max(0.0, (m - 0.4) / 0.6))
