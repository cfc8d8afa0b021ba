"""Prompts, parsing, choose-mode scoring and the environment pool."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from agent_envs.agent.prompts import build_prompt, parse_action
from agent_envs.rollout import EnvPool, RolloutWorkerError
from trainers.generation import TransformersBackend, score_candidates
from trainers.lm_policy import fill_slots
from trainers.models import load_policy
from trainers.objective import pack_rows, sequence_logprobs


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


def _reference_scores(model, prompts, cands, pad_id):
    out = []
    for p, cs in zip(prompts, cands):
        row = []
        for c in cs:
            with torch.no_grad():
                lp, _ = sequence_logprobs(model, pack_rows([p], [c], pad_id))
            row.append(float(lp.sum()))
        out.append(row)
    return out


@pytest.mark.parametrize("kind", ["tiny-llama", "tiny-qwen2"])
def test_prefix_tree_scores_equal_separate_rows(kind):
    # candidates that share first tokens (one is a prefix of another), a duplicated
    # (prompt, candidates) item, an item without candidates, and prompts of different length
    model, tok = load_policy(kind, seed=3)
    pad = tok.pad_token_id
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [5, 6, 7, 8, 9, 10, 11], [14, 15, 16], [17]]
    cands = [
        [[20, 21, 22, 2], [20, 21, 23, 2], [20, 24, 2], [20, 21, 22, 25, 2]],
        [[26, 2], [26, 27, 28, 2]],
        [[20, 21, 22, 2], [20, 21, 23, 2], [20, 24, 2], [20, 21, 22, 25, 2]],
        [],
        [[30]],
    ]
    ref = _reference_scores(model, prompts, cands, pad)
    for max_rows, max_tokens in ((64, 4096), (1, 4096), (64, 12)):  # one forward; one row each; tiny budget
        got = score_candidates(model, prompts, cands, pad_id=pad, max_rows=max_rows, max_tokens=max_tokens)
        assert [len(g) for g in got] == [4, 2, 4, 0, 1]
        for g, r in zip(got, ref):
            assert g.tolist() == pytest.approx(r, abs=1e-4)
    assert got[0].tolist() == got[2].tolist()  # scored once, shared


def test_prefix_tree_scores_with_lora_and_the_whole_model_fallback():
    from trainers.models import apply_lora

    base, tok = load_policy("tiny-llama", seed=4)
    model = apply_lora(base, r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(0.3)  # adapters that change the policy
    prompts, cands = [[5, 6, 7], [8, 9, 10, 11]], [[[20, 21], [20, 22], [23]], [[24, 25, 26], [24, 25]]]
    ref = _reference_scores(model, prompts, cands, tok.pad_token_id)
    got = score_candidates(model, prompts, cands, pad_id=tok.pad_token_id)
    for g, r in zip(got, ref):
        assert g.tolist() == pytest.approx(r, abs=1e-4)
    # a model that post-processes its logits is called whole (logits of the tree window)
    model.get_base_model().config.final_logit_softcapping = 30.0  # Llama ignores it; forces the fallback
    try:
        again = score_candidates(model, prompts, cands, pad_id=tok.pad_token_id)
    finally:
        model.get_base_model().config.final_logit_softcapping = None
    for g, r in zip(again, ref):
        assert g.tolist() == pytest.approx(r, abs=1e-4)
    with pytest.raises(ValueError, match="one candidate list per prompt"):
        score_candidates(model, prompts, cands[:1], pad_id=tok.pad_token_id)


def test_compact_prompt_and_system_message():
    from agent_envs.agent.prompts import compact_observation
    from trainers.lm_policy import _encode_prompt

    obs = "-= Welcome to TextWorld, ALFRED! =-\n\nYou see a mug 1,  and a sink 1.\n\nYour task is to: put a mug in sink."
    assert compact_observation(obs, "put a mug in sink.") == "You see a mug 1, and a sink 1."
    assert compact_observation("Your task is to: heat an egg.", "put a mug in sink.") == "Your task is to: heat an egg."
    full = build_prompt("put a mug in sink.", obs, ["take mug 1"], [(obs, "look")], style="action_only")
    short = build_prompt("put a mug in sink.", obs, ["take mug 1"], [(obs, "look")], style="action_only", compact=True)
    assert "Welcome" in full and "You control an agent" in full
    assert "Welcome" not in short and "Your task is to" not in short and "You control an agent" not in short
    assert "Goal: put a mug in sink." in short and "take mug 1" in short and "[turn 1] did: look" in short
    assert "from the list" not in build_prompt("g", "o", ["a"], [], style="action_only", list_actions=False)
    _, tok = load_policy("tiny-llama")
    with_sys = tok.decode(_encode_prompt(tok, "hello", 512, "be brief"))
    assert with_sys.startswith("<|im_start|>system\nbe brief<|im_end|>") and "hello" in with_sys
    assert not tok.decode(_encode_prompt(tok, "hello", 512)).startswith("<|im_start|>system")


def test_generate_backend_returns_responses_that_end_at_eos():
    model, tok = load_policy("tiny-qwen2", seed=0)
    torch.manual_seed(0)
    out = TransformersBackend(model, tok).generate([[5, 6, 7], [8]], temperature=1.0, top_p=1.0, max_new_tokens=5)
    assert len(out) == 2
    for resp in out:
        assert 1 <= len(resp) <= 5
        assert tok.eos_token_id not in resp[:-1]


def _make_toy():
    """A two-step environment whose rubric channel ``held`` rises at step 1 and falls at step 2."""
    import gymnasium as gym

    class Toy(gym.Env):
        observation_space = gym.spaces.Text(50)
        action_space = gym.spaces.Text(50)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return "start", {"rubric": {"held": False, "invalid_actions": 0}, "penalty": 0.0}

        def step(self, action):
            self.t += 1
            held = self.t == 1
            return f"t{self.t}", 0.0, self.t >= 2, False, {"rubric": {"held": held, "invalid_actions": self.t}, "penalty": -0.1}

    return Toy()


def test_env_pool_rubric_shaping_adds_to_the_penalty():
    import gymnasium as gym

    if "RubricToy-v0" not in gym.registry:
        gym.register("RubricToy-v0", entry_point=_make_toy, disable_env_checker=True)
    from functools import partial

    from wrappers.shaping import make_shaped

    with EnvPool(partial(make_shaped, "RubricToy-v0", 0.5), n=1, workers=0) as pool:
        pool.reset([(0, 1, None)])
        # step 1: held False -> True (+1 channel; the diagnostic invalid_actions is ignored)
        # penalty = -0.1 + 0.5 * 1 = 0.4; step 2: held True -> False: -0.1 - 0.5 = -0.6
        (*_, i1), = pool.step([(0, "a")])
        (*_, i2), = pool.step([(0, "b")])
    assert i1["penalty"] == pytest.approx(0.4) and i2["penalty"] == pytest.approx(-0.6)
    assert (i1["shaping"], i2["shaping"]) == (0.5, -0.5)


def test_env_pool_runs_in_workers_and_reports_env_errors():
    import gymnasium as gym

    with EnvPool("CartPole-v1", {}, n=3, workers=2) as pool:
        inproc = gym.make("CartPole-v1")
        obs, _ = inproc.reset(seed=4)
        res = pool.reset([(0, 4, None), (1, 4, None), (2, 5, None)])
        assert res[0][0].tolist() == res[1][0].tolist() == obs.tolist()  # same seed, same start
        stepped = pool.step([(2, 1), (0, 0)])
        assert [r[1] for r in stepped] == [1.0, 1.0]
        with pytest.raises(RolloutWorkerError, match="CartPole-v1 raised in a rollout worker"):
            pool.step([(1, "not an action")])
        with pytest.raises(IndexError, match="out of range"):
            pool.step([(7, 0)])
