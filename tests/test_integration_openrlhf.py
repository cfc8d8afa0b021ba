"""OpenRLHF agent file: rubricgym episodes played through OpenRLHF's own
``MultiTurnAgentExecutor.execute`` with a stand-in engine (vLLM cannot run here)."""

from __future__ import annotations

import asyncio
import importlib.util
import types

import pytest

INSTALL = 'pip install -e ".[openrlhf]" && pip install --no-deps openrlhf==0.11.2'

try:
    from openrlhf.utils.agent import AgentExecutorBase, MultiTurnAgentExecutor
except ImportError as exc:  # name what failed: OpenRLHF itself, or a module its agent file imports
    missing = getattr(exc, "name", None) or ""
    what = ("OpenRLHF is not installed" if missing.split(".")[0] == "openrlhf"
            else f"OpenRLHF's agent module does not import: {exc}")
    pytest.skip(f"{what}: {INSTALL}", allow_module_level=True)

from wrappers.integrations import openrlhf_agent
from wrappers.integrations.episode import episode_pool, task_prompt

WIN = ["search[trail running shoes]", "click[b000000001]", "click[navy blue]", "click[10]", "click[buy now]"]


class StandInEngine:
    """Answers like vLLM's AsyncLLMEngine: one scripted response per call, as token ids."""

    def __init__(self, tokenizer, responses: list[str]) -> None:
        self.tok, self.responses, self.seen = tokenizer, list(responses), []

    async def generate(self, prompt_ids, sampling_params, multi_modal_data=None):
        self.seen.append(list(prompt_ids))
        text = self.responses.pop(0)
        ids = self.tok.encode(text, add_special_tokens=False) + [self.tok.eos_token_id]
        out = types.SimpleNamespace(token_ids=ids, text=text, finish_reason="stop", logprobs=None)
        return types.SimpleNamespace(outputs=[out])


@pytest.fixture()
def tokenizer():
    from trainers.models import build_tiny_tokenizer

    return build_tiny_tokenizer()


@pytest.fixture()
def env_vars(monkeypatch, mini_dir: str) -> None:
    monkeypatch.setenv("RUBRICGYM_ENV", "WebShop-Rubric-v0")
    monkeypatch.setenv("RUBRICGYM_ENV_KWARGS", f'{{"catalogue": "{mini_dir}", "verify": false, "tagger": "lexicon"}}')
    monkeypatch.setenv("RUBRICGYM_MAX_TURNS", "6")


def load_agent_file():
    """The way OpenRLHF's vllm_engine._load_agent_executor loads --train.agent_func_path."""
    spec = importlib.util.spec_from_file_location("agent_module", openrlhf_agent.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert issubclass(module.AgentExecutor, AgentExecutorBase)
    executor = module.AgentExecutor()
    executor.module = module
    return executor


def run(executor, tokenizer, responses: list[str], label: str, max_length: int = 4096) -> tuple[dict, StandInEngine]:
    engine = StandInEngine(tokenizer, responses)
    params = types.SimpleNamespace(max_tokens=64, logprobs=None)
    out = asyncio.run(executor.execute("the dataset prompt (replaced)", label, params, max_length, tokenizer, engine))
    return out, engine


def test_agent_file_plays_a_webshop_episode(env_vars, tokenizer) -> None:
    executor = load_agent_file()
    assert isinstance(executor, MultiTurnAgentExecutor)
    out, engine = run(executor, tokenizer, [f"<action>{a}</action>" for a in WIN], task_prompt(0, seed=0))
    # five decisions, the purchase earns the task reward 10; the score is the raw WebShop score
    assert out["reward"] == 10.0 and float(out["scores"]) == 1.0 and len(out["action_ranges"]) == 5
    text = tokenizer.decode(out["observation_tokens"])
    assert text.startswith("<|im_start|>user\nYou control an agent") and "Possible actions: search[<your query>]" in text
    assert text.count("<|im_start|>assistant\n") == 5 and text.count("<|im_start|>user\n") == 5
    # each action range holds exactly the response tokens (+ EOS); the environment turns lie between
    for (a, b), action in zip(out["action_ranges"], WIN):
        assert tokenizer.decode(out["observation_tokens"][a:b]) == f"<action>{action}</action><|im_end|>"
    # the engine saw the growing conversation, each prompt ending with the assistant header
    assert all(tokenizer.decode(p).endswith("<|im_start|>assistant\n") for p in engine.seen)
    (traj,) = executor.last_trajectories
    assert [s.action for s in traj.steps] == WIN and traj.success and traj.outcome == 10.0


def test_invalid_responses_and_the_turn_limit(env_vars, tokenizer, monkeypatch) -> None:
    monkeypatch.setenv("RUBRICGYM_MAX_TURNS", "2")
    executor = load_agent_file()
    out, _ = run(executor, tokenizer, ["no block", "<action>search[shoes]</action>"], task_prompt(0))
    assert out["reward"] == pytest.approx(-0.1) and len(out["action_ranges"]) == 2
    (traj,) = executor.last_trajectories
    assert traj.truncated and [s.valid for s in traj.steps] == [False, True]


def test_agent_file_plays_a_sokoban_episode_won_by_the_family_expert(monkeypatch, tokenizer) -> None:
    """Sokoban through the agent file with nothing Sokoban-specific in it: the family's expert
    solves level 3 of the train split (12 moves, see test_integration_skyrl.py) and its
    solution, as the engine's responses, wins the sample in the environment's worker process."""
    import gymnasium as gym

    from agent_envs.family import family_of

    monkeypatch.setenv("RUBRICGYM_ENV", "Sokoban-Rubric-v0")
    monkeypatch.delenv("RUBRICGYM_ENV_KWARGS", raising=False)
    monkeypatch.setenv("RUBRICGYM_MAX_TURNS", "15")
    env = gym.make("Sokoban-Rubric-v0")
    _, info = env.reset(options={"task": 3, "split": "train"})
    plan = family_of(env).expert_plan(info)
    env.close()
    assert len(plan) == 12
    executor = load_agent_file()
    # twelve turns of a 512-character prompt (338 tokens of the tiny tokenizer) take more than
    # the other tests' 4096 tokens: there OpenRLHF stops the sample after 11 decisions
    out, engine = run(executor, tokenizer, [f"<action>{a}</action>" for a in plan], task_prompt(3, seed=0, split="train"),
                      max_length=8192)
    # eleven moves at -0.1, the last +1 (box on target) +10 (solved) -0.1; the score: every box placed
    assert out["reward"] == pytest.approx(9.8) and float(out["scores"]) == 1.0 and len(out["action_ranges"]) == 12
    text = tokenizer.decode(out["observation_tokens"])
    assert "######\n#____#\n#__X_#\n#O__##\n#P_###\n######" in text and "√ box on target" in text
    for (a, b), action in zip(out["action_ranges"], plan):
        assert tokenizer.decode(out["observation_tokens"][a:b]) == f"<action>{action}</action><|im_end|>"
    assert len(engine.seen) == 12
    (traj,) = executor.last_trajectories
    assert [s.action for s in traj.steps] == plan and traj.success and traj.task_id == "sokoban/6x6-1box/3"
    assert all(s.valid for s in traj.steps) and traj.steps[0].keys["exact"] == ((4, 1), ((2, 3),))


def _episode_pool():
    cfg = openrlhf_agent.AgentConfig.from_environ()
    return episode_pool(cfg.env, cfg.env_kwargs, workers=cfg.env_workers, backend=cfg.env_backend,
                        pool_options=cfg.env_pool_options)


def test_environments_are_reused_across_samples(env_vars, tokenizer) -> None:
    executor = load_agent_file()
    run(executor, tokenizer, [f"<action>{a}</action>" for a in WIN], task_prompt(0))
    pool = _episode_pool()
    idle = pool.idle
    assert len(idle) == 1 and len(pool.pool.procs) == 1  # the environment lives in a worker process
    run(executor, tokenizer, [f"<action>{a}</action>" for a in WIN], task_prompt(0))
    assert pool.idle == idle  # the second sample took the same environment and gave it back
    assert len(executor.last_trajectories) == 2


def test_steps_do_not_block_openrlhfs_event_loop(tokenizer, tmp_path, monkeypatch) -> None:
    """The environment's step waits for a gate file that another coroutine of OpenRLHF's event
    loop opens once the first response is generated: the sample wins only if the loop kept
    running while the environment stepped (in its worker process)."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "integrations"))  # rubricgym_gated_env
    from rubricgym_gated_env import open_gate_when

    gate = tmp_path / "gate"
    monkeypatch.setenv("RUBRICGYM_ENV", "rubricgym_gated_env:Gated-v0")
    monkeypatch.setenv("RUBRICGYM_ENV_KWARGS", f'{{"gate": "{gate}", "wait": 20}}')
    executor = load_agent_file()
    engine = StandInEngine(tokenizer, ["<action>wait</action>"])
    params = types.SimpleNamespace(max_tokens=64, logprobs=None)

    async def main():
        out, _ = await asyncio.gather(executor.execute("p", task_prompt(0), params, 4096, tokenizer, engine),
                                      open_gate_when(lambda: engine.seen, gate))
        return out

    assert asyncio.run(main())["reward"] == 10.0


def test_bad_environment_variables_are_named(monkeypatch) -> None:
    monkeypatch.setenv("RUBRICGYM_ENV_KWARGS", "[1, 2]")
    with pytest.raises(ValueError, match="RUBRICGYM_ENV_KWARGS must be a JSON object"):
        openrlhf_agent.AgentConfig.from_environ()


def test_pool_options_reach_the_environments_workers(env_vars, tokenizer, monkeypatch) -> None:
    """``RUBRICGYM_ENV_POOL_OPTIONS``: the episode wins through a worker under SCHED_IDLE with the
    pool's timeout; bad JSON and unknown options are refused by name."""
    import os

    monkeypatch.setenv("RUBRICGYM_ENV_POOL_OPTIONS", '{"worker_idle": true, "timeout": 120}')
    executor = load_agent_file()
    out, _ = run(executor, tokenizer, [f"<action>{a}</action>" for a in WIN], task_prompt(0))
    assert out["reward"] == 10.0
    pool = _episode_pool().pool
    assert [os.sched_getscheduler(p.pid) for p in pool.procs] == [os.SCHED_IDLE] and pool.timeout == 120
    monkeypatch.setenv("RUBRICGYM_ENV_POOL_OPTIONS", '{"nice": 5}')
    with pytest.raises(ValueError, match=r"unknown pool options \['nice'\]"):
        openrlhf_agent.AgentConfig.from_environ()
    monkeypatch.setenv("RUBRICGYM_ENV_POOL_OPTIONS", "idle")
    with pytest.raises(ValueError, match="RUBRICGYM_ENV_POOL_OPTIONS must be a JSON object"):
        openrlhf_agent.AgentConfig.from_environ()


def test_an_episode_ended_by_the_token_budget_is_recorded_and_pooled(env_vars, tokenizer) -> None:
    """OpenRLHF stops a sample when ``max_length`` tokens are used up, without telling the
    agent: the episode used to stay open, its environment was never pooled and no trajectory
    was kept (0 idle environments and 0 trajectories after 3 samples)."""
    executor = load_agent_file()
    _, engine = run(executor, tokenizer, [f"<action>{a}</action>" for a in WIN], task_prompt(0))
    first_prompt = len(engine.seen[0])
    pool = _episode_pool()
    idle = pool.idle
    # room for the first prompt and one response; the next user turn (a results page) overflows it
    budget = first_prompt + 100
    for _ in range(3):
        out, engine = run(executor, tokenizer, [f"<action>{a}</action>" for a in WIN], task_prompt(0), max_length=budget)
        assert len(engine.seen) == 1 and len(out["action_ranges"]) == 1  # OpenRLHF stopped after one decision
        assert pool.idle == idle  # the environment came back to the pool and the next sample reused it
    won, *cut = executor.last_trajectories
    assert won.success and not won.truncated and len(cut) == 3
    assert all(t.truncated and not t.success and [s.action for s in t.steps] == WIN[:1] for t in cut)


def test_an_engine_failure_retires_the_episode_environment(env_vars, tokenizer) -> None:
    executor = load_agent_file()
    pool = _episode_pool()
    before = pool.idle
    with pytest.raises(IndexError):  # the stand-in engine runs out of responses mid-episode
        run(executor, tokenizer, [f"<action>{a}</action>" for a in WIN[:2]], task_prompt(0))
    assert len(pool.idle) == max(len(before) - 1, 0)  # the half-played episode's slot is not given back
    assert not executor.last_trajectories


def test_doc_command_uses_only_openrlhfs_flags_and_starts_vllm_engines() -> None:
    """docs/integrations/openrlhf.md's GPU command: every flag is one OpenRLHF 0.11.2's train_ppo_ray
    parser defines, vLLM engines are asked for (without them OpenRLHF never loads the agent
    file), and colocate_all's actor GPUs = engines x tensor-parallel size."""
    import re
    import shlex
    from pathlib import Path

    spec = importlib.util.find_spec("openrlhf.cli.train_ppo_ray")
    source = Path(spec.origin).read_text(encoding="utf-8")
    defined = set(re.findall(r'add_argument\(\s*"(--[\w.]+)"', source))
    doc = (Path(__file__).resolve().parents[1] / "docs" / "integrations" / "openrlhf.md").read_text(encoding="utf-8")
    block = doc[doc.index("python -m openrlhf.cli.train_ppo_ray"):]
    block = block[: block.index("```")].replace("\\\n", " ")
    words = shlex.split(re.sub(r'"\$\(python -c .*?\)"', "AGENT", block))
    flags = [w for w in words if w.startswith("--")]
    assert flags and set(flags) <= defined, sorted(set(flags) - defined)
    value = {w: words[i + 1] for i, w in enumerate(words[:-1]) if w.startswith("--")}
    assert int(value["--vllm.num_engines"]) >= 1
    assert "--train.colocate_all" in flags
    assert int(value["--actor.num_nodes"]) * int(value["--actor.num_gpus_per_node"]) == \
        int(value["--vllm.num_engines"]) * int(value["--vllm.tensor_parallel_size"])
