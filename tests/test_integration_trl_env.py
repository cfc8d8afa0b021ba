"""TRL's public ``environment_factory`` API: a real ``GRPOTrainer.train()`` step
whose rollouts call rubricgym's WebShop tools through TRL's own tool-calling loop and whose reward
is the environment's ``get_reward``.

The policy is the tiny model (a real forward pass, log-probs and update); only its *sampling* is
a recording stand-in (a real model would have to learn the tool-call format first): each turn it
writes, as a Qwen-style ``<tool_call>``, the next step of the WebShop oracle's plan for the goal
in the prompt; every other episode stops calling tools after its first step (and is lost), so
siblings differ and some win.
"""

from __future__ import annotations

import json
import os
import re

import pytest

pytest.importorskip("trl", reason="TRL is not installed: pip install 'trl>=1.16,<1.17' jmespath (or pip install -e '.[trl]')")

import gymnasium as gym
import torch

import agent_envs  # noqa: F401
from agent_envs.agent.tools import ACTION_KINDS, action_to_call, call_to_action, kinds_of
from wrappers.integrations.trl_env import (
    OVER,
    ALFWorldTools,
    RubricEnvironments,
    WebShopTools,
    tool_task_dataset,
)

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _kwargs(mini_dir: str) -> dict:
    return {"catalogue": mini_dir, "verify": False, "tagger": "lexicon", "goal_kind": "synthetic", "max_steps": 8}


def oracle_plans(mini_dir: str, tasks: list[int]) -> dict[str, list[str]]:
    """goal -> the oracle's actions to a purchase (played on a mirror environment)."""
    from agent_envs.webshop.oracle import oracle_action

    env = gym.make("WebShop-Rubric-v0", **_kwargs(mini_dir))
    plans = {}
    for task in tasks:
        _, info = env.reset(seed=0, options={"task": task})
        plan, done = [], False
        while not done:
            action = oracle_action(env.unwrapped)
            plan.append(action)
            _, _, term, trunc, info = env.step(action)
            done = term or trunc
        assert info["won"], plan
        plans[str(info["task"]["goal"])] = plan
    env.close()
    return plans


class ScriptedSampler:
    """Stands in for ``model.generate``: prompt + the next tool call of the plan (or no call)."""

    def __init__(self, tok, plans: dict[str, list[str]]) -> None:
        self.tok, self.plans, self.second_turns = tok, plans, 0
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, input_ids, attention_mask=None, **_kwargs):
        rows = []
        for ids, mask in zip(input_ids, attention_mask):
            text = self.tok.decode(ids[mask.bool()].tolist())
            goal = re.search(r"Goal: (.*)", text).group(1).strip()
            made = text.split("<|im_start|>user", 1)[1].count("<tool_call>")  # past the tools' system block
            plan = self.plans[goal]
            if made == 1:
                self.second_turns += 1
            if made < len(plan) and not (made == 1 and self.second_turns % 2 == 0):  # every other episode gives up
                name, args = action_to_call(plan[made])
                self.calls.append((name, args))
                reply = f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call><|im_end|>'
            else:
                reply = "Done.<|im_end|>"
            rows.append(torch.tensor(self.tok.encode(reply, add_special_tokens=False)))
        width = max(len(r) for r in rows)
        pad = self.tok.pad_token_id
        tail = torch.stack([torch.cat([r, torch.full((width - len(r),), pad)]) for r in rows])
        return torch.cat([input_ids, tail], dim=1)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, mini_dir):
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    from trainers.models import load_policy

    torch.set_num_threads(1)
    model, tok = load_policy("tiny-llama", seed=0)
    tok.chat_template = qwen2_5_chat_template  # a template whose tool calls TRL knows how to parse
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    factory = RubricEnvironments("WebShop-Rubric-v0", _kwargs(mini_dir))
    sampler = ScriptedSampler(tok, oracle_plans(mini_dir, [0, 1]))
    model.generate = sampler
    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("trl_env")), per_device_train_batch_size=4,
                      num_generations=2, max_completion_length=4096, max_tool_calling_iterations=8, max_steps=1,
                      learning_rate=1e-2, beta=0.0, report_to="none", use_cpu=True, seed=3, save_strategy="no",
                      logging_steps=1, temperature=1.0)
    trainer = GRPOTrainer(model, args=args, processing_class=tok, environment_factory=factory,
                          train_dataset=tool_task_dataset([0, 1], seed=0))
    trainer.train()
    yield trainer, before, factory, sampler
    factory.close()


def test_trl_exposes_one_tool_per_action_kind(trained) -> None:
    trainer = trained[0]
    assert sorted(t.__name__ for t in trainer.tools) == ["click", "search"]


def test_rollouts_step_the_environment_through_trls_tool_loop(trained) -> None:
    _, _, factory, sampler = trained
    episodes = factory.pop_trajectories()
    assert len(episodes) == 4  # 2 tasks x 2 generations, each scored once by get_reward
    # every tool call TRL executed is one recorded environment step, with the action it names
    actions = [s.action for t in episodes for s in t.steps]
    assert sorted(actions) == sorted(call_to_action(n, a) for n, a in sampler.calls)
    won = [t.success for t in episodes]
    assert any(won) and not all(won), [[s.action for s in t.steps] for t in episodes]
    ids = sorted(t.task_id for t in episodes)  # two different tasks, two siblings each
    assert ids[0] == ids[1] != ids[2] == ids[3], ids


def test_get_reward_is_trls_reward_and_the_update_moves_the_weights(trained) -> None:
    trainer, before, _, _ = trained
    logged = next(r for r in trainer.state.log_history if "rewards/WebShopTools/mean" in r)
    assert logged["tools/call_frequency"] > 0
    assert 0 < logged["rewards/WebShopTools/mean"] < 10  # wins pay 10, the others less
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert changed, "the optimiser step changed no weight"


def test_a_call_after_the_end_steps_nothing(mini_dir) -> None:
    factory = RubricEnvironments("WebShop-Rubric-v0", {**_kwargs(mini_dir), "max_steps": 1})
    env = factory()
    env.reset(task=0, seed=0)
    assert "The episode is over" in env.click(button="no such button")  # invalid: the penalty, then the horizon
    assert env.search(query="shoes") == OVER
    first, again = env.get_reward(), env.get_reward()
    (episode,) = factory.pop_trajectories()  # scored once, however often TRL asks
    assert len(episode.steps) == 1 and not episode.steps[0].valid
    assert first == again == episode.steps[0].reward + episode.steps[0].penalty < 0
    factory.close()


def test_scored_episodes_are_kept_bounded(mini_dir) -> None:
    """A run that never pops its trajectories keeps only the last ``keep`` of them."""
    factory = RubricEnvironments("WebShop-Rubric-v0", _kwargs(mini_dir), keep=2)
    env = factory()
    for k in range(3):
        env.reset(task=0, seed=k)
        env.search(query="shoes" * (k + 1))
        env.get_reward()
    assert [t.steps[0].action for t in factory.pop_trajectories()] == ["search[shoesshoes]", "search[shoesshoesshoes]"]
    assert factory.pop_trajectories() == []
    factory.close()


def test_tool_classes_match_the_action_kinds() -> None:
    """The tool methods are the kinds of agent_envs.agent.tools, with their descriptions."""
    docs = {name: doc for name, _t, doc in ACTION_KINDS}
    for cls, env_id in ((ALFWorldTools, "ALFWorld-Rubric-v0"), (WebShopTools, "WebShop-Rubric-v0")):
        public = sorted(n for n in vars(cls) if not n.startswith("_"))
        assert public == sorted(kinds_of(env_id))
        for name in public:
            assert getattr(cls, name).__doc__.splitlines()[0] == docs[name]


def test_action_to_call_inverts_call_to_action_on_real_games() -> None:
    """Every admissible action of real ALFWorld turns (the generated games) is one tool call and back."""
    pytest.importorskip("alfworld", reason="pip install -e '.[alfworld]'")
    env = gym.make("ALFWorld-Rubric-v0", split="generated")
    for task in range(3):
        _, info = env.reset(seed=0, options={"task": task})
        for action in info["admissible_actions"]:
            name, args = action_to_call(action)
            assert call_to_action(name, args) == action
    env.close()


def test_the_dataset_names_only_tasks_the_generated_split_holds(tmp_path) -> None:
    """``factory.tasks()`` lists the split's tasks (here 4 generated games), so every row of the
    documented ``tool_task_dataset(factory.tasks())`` resets; ``range(2000)`` would not."""
    pytest.importorskip("alfworld", reason="pip install -e '.[alfworld]'")
    kwargs = {"split": "generated", "generated_n": 4, "generated_cache_dir": str(tmp_path / "games")}
    factory = RubricEnvironments("ALFWorld-Rubric-v0", kwargs)
    tasks = factory.tasks()
    assert len(tasks) == len(set(tasks)) == 4
    rows = tool_task_dataset(tasks, seed=0)
    env = factory()
    goals = {env.reset(**row).split("Possible actions")[0] for row in rows}
    assert len(goals) == 4  # four different games
    assert factory.tasks(2) == tasks[:2]
    with pytest.raises(ValueError, match="has 4 tasks, not 5"):
        factory.tasks(5)
    with pytest.raises(ValueError, match="out of range: split 'generated' has 4 tasks"):
        env.reset(task=1542)
    factory.close()
