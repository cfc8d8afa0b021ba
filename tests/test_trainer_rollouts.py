"""Prompts, parsing, choose-mode scoring and the environment pool."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from trainers.env_workers import EnvPool, EnvWorkerError  # noqa: E402
from trainers.generation import TransformersBackend, score_candidates  # noqa: E402
from trainers.models import load_policy  # noqa: E402
from trainers.objective import pack_rows, sequence_logprobs  # noqa: E402
from trainers.prompts import build_prompt, parse_action  # noqa: E402
from trainers.rollouts import fill_slots  # noqa: E402


def test_prompt_has_task_observation_actions_and_two_recent_pairs():
    hist = [("obs one", "go to a"), ("obs two", "go to b")]
    p = build_prompt("heat an egg", "You see an egg 1.", ["take egg 1", "look"], hist, style="think", step=5)
    assert "heat an egg" in p and "You see an egg 1." in p and "take egg 1 | look" in p
    assert "obs one" in p and "go to b" in p and "turn 6" in p  # 5 actions taken: now turn 6
    assert "<think>" in p and "<action>" in p
    only = build_prompt("g", "o", ["a"], [], style="action_only", list_actions=False)
    assert "<think>" not in only and "Possible actions" not in only
    short = build_prompt("g", "o", ["a"], hist, max_chars=len(build_prompt("g", "o", ["a"], hist[1:])))
    assert "obs one" not in short and "obs two" in short  # the oldest history goes first
    with pytest.raises(ValueError, match="style must be one of"):
        build_prompt("g", "o", [], [], style="poem")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>hm</think><action>Take Egg 1</action>", ("take egg 1", True)),
        ("<action>go to x</action> then <action> look </action>", ("look", True)),
        ("<action>fly away</action>", ("fly away", False)),
        ("take egg 1", ("take egg 1", False)),
        ("<action>take egg 1", ("<action>take egg 1", False)),
        ("", ("", False)),
    ],
)
def test_parse_action(text, expected):
    assert parse_action(text, ["take egg 1", "look", "go to x"]) == expected


def test_fill_slots_uses_the_goal_for_templated_actions():
    assert fill_slots("search[<your query>]", "A Red  Mug") == "search[a red mug]"


def test_choose_scores_equal_full_sequence_logprobs():
    model, tok = load_policy("tiny-llama", seed=2)
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    cands = [[[20, 21], [22], [23, 24, 25]], [[26]], [[27, 28], [29, 30, 31, 32]]]
    cached = score_candidates(model, prompts, cands, pad_id=tok.pad_token_id, max_rows=3)
    for e, (p, cs) in enumerate(zip(prompts, cands)):
        for j, c in enumerate(cs):
            with torch.no_grad():
                lp, _ = sequence_logprobs(model, pack_rows([p], [c], tok.pad_token_id))
            assert float(cached[e][j]) == pytest.approx(float(lp.sum()), abs=1e-4)


def test_generate_backend_returns_responses_that_end_at_eos():
    model, tok = load_policy("tiny-qwen2", seed=0)
    torch.manual_seed(0)
    out = TransformersBackend(model, tok).generate([[5, 6, 7], [8]], temperature=1.0, top_p=1.0, max_new_tokens=5)
    assert len(out) == 2
    for resp in out:
        assert 1 <= len(resp) <= 5
        assert tok.eos_token_id not in resp[:-1]


def test_env_pool_runs_in_workers_and_reports_env_errors():
    import gymnasium as gym

    with EnvPool("CartPole-v1", {}, n=3, workers=2) as pool:
        inproc = gym.make("CartPole-v1")
        obs, _ = inproc.reset(seed=4)
        res = pool.reset([(0, 4, None), (1, 4, None), (2, 5, None)])
        assert res[0][0].tolist() == res[1][0].tolist() == obs.tolist()  # same seed, same start
        stepped = pool.step([(2, 1), (0, 0)])
        assert [r[1] for r in stepped] == [1.0, 1.0]
        with pytest.raises(EnvWorkerError, match="CartPole-v1 failed in a worker"):
            pool.step([(1, "not an action")])
        with pytest.raises(IndexError, match="out of range"):
            pool.step([(7, 0)])
