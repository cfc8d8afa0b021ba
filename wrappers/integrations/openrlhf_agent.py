"""OpenRLHF agent file: rubricgym environments behind OpenRLHF's multi-turn agent executor.

Install: ``pip install --no-deps openrlhf==0.11.2 && pip install aiohttp pylatexenc`` (a
normal install pins deepspeed and flash-attn builds; the agent API needs only these).  Pass
this file to OpenRLHF::

    python -m openrlhf.cli.train_ppo_ray ... \\
        --train.agent_func_path $(python -c "import wrappers.integrations.openrlhf_agent as m; print(m.__file__)") \\
        --data.label_key task          # each row's label: task_prompt() JSON, e.g. {"task": 3, "seed": 0}

OpenRLHF builds ``AgentExecutor()`` without arguments, so the environment comes from the
environment variables ``RUBRICGYM_ENV`` (a Gymnasium id, default ``WebShop-Rubric-v0``),
``RUBRICGYM_ENV_KWARGS`` (JSON for ``gym.make``), ``RUBRICGYM_MAX_TURNS`` (default 50) and
``RUBRICGYM_STYLE`` (``action_only`` or ``think``), ``RUBRICGYM_ENV_WORKERS`` (worker
processes the environments live in, default 1; 0: in this process on one engine thread) and
``RUBRICGYM_ENV_BACKEND`` (``process`` or ``ray``: Ray actors, spread over OpenRLHF's Ray
cluster) and ``RUBRICGYM_ENV_POOL_OPTIONS`` (JSON: more of the pool's options, any of
:data:`~wrappers.integrations.episode.POOL_OPTIONS`, e.g. ``{"timeout": 600, "worker_idle": true}``);
or subclass :class:`AgentExecutor` with a :class:`AgentConfig`.  Environments are
reset and stepped with ``await`` (:class:`~wrappers.integrations.episode.EpisodePool`), never
on OpenRLHF's event loop.

Each sample is one episode: :meth:`RubricAgent.reset` ignores the dataset prompt and starts
the environment on the row's label (the task), returning the first decision prompt in the
model's chat template; :meth:`RubricAgent.step` parses the response's ``<action>`` block,
steps the environment and returns the step reward and the next user turn as the
environment feedback.  OpenRLHF sums the step rewards into the sample's reward: its
advantage estimators are a fixed list (no registry), so the credit is outcome-level.  The
decisions are recorded as :class:`~rubrics.trajectory.Step` objects
(``RubricAgent.episode.steps``; :attr:`AgentExecutor.last_trajectories` keeps the finished
episodes of the process, those OpenRLHF cut short at its token budget as truncated) for
step-level credit with rubricgym's estimators.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Mapping
from typing import Any

from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

from agent_envs.agent.chat import chat_next_turn, chat_start
from rubrics.trajectory import Trajectory
from wrappers.integrations.episode import (
    EpisodePool,
    TextEpisode,
    check_pool_options,
    episode_pool,
    parse_task,
)

__all__ = ["AgentConfig", "AgentExecutor", "RubricAgent"]


class AgentConfig:
    """Which environment the agents play (see the module docstring for the variables).

    (A plain class: OpenRLHF loads this file by path, outside ``sys.modules``, where a
    dataclass cannot resolve its annotations.)
    """

    env = "WebShop-Rubric-v0"
    max_turns = 50
    style = "action_only"
    env_workers = 1
    env_backend = "process"

    def __init__(self, env: str = env, env_kwargs: Mapping[str, Any] | None = None, max_turns: int = max_turns,
                 style: str = style, env_workers: int = env_workers, env_backend: str = env_backend,
                 env_pool_options: Mapping[str, Any] | None = None) -> None:
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive int, got {max_turns!r}")
        if isinstance(env_workers, bool) or not isinstance(env_workers, int) or env_workers < 0:
            raise ValueError(f"env_workers must be a non-negative int, got {env_workers!r}")
        if env_backend not in ("process", "ray", "remote"):
            raise ValueError(f"env_backend must be 'process', 'ray' or 'remote', got {env_backend!r}")
        self.env, self.env_kwargs, self.max_turns, self.style = env, dict(env_kwargs or {}), max_turns, style
        self.env_workers, self.env_backend = env_workers, env_backend
        self.env_pool_options = check_pool_options(env_pool_options)

    def __repr__(self) -> str:
        return (f"AgentConfig(env={self.env!r}, env_kwargs={self.env_kwargs!r}, max_turns={self.max_turns}, "
                f"style={self.style!r}, env_workers={self.env_workers}, env_backend={self.env_backend!r}, "
                f"env_pool_options={self.env_pool_options!r})")

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> AgentConfig:
        """The configuration from ``RUBRICGYM_ENV``, ``RUBRICGYM_ENV_KWARGS``, ... ."""
        env = os.environ if environ is None else environ
        kwargs, options = _json_object(env, "RUBRICGYM_ENV_KWARGS"), _json_object(env, "RUBRICGYM_ENV_POOL_OPTIONS")
        return cls(env=env.get("RUBRICGYM_ENV", cls.env), env_kwargs=kwargs, env_pool_options=options,
                   max_turns=int(env.get("RUBRICGYM_MAX_TURNS", cls.max_turns)),
                   style=env.get("RUBRICGYM_STYLE", cls.style),
                   env_workers=int(env.get("RUBRICGYM_ENV_WORKERS", cls.env_workers)),
                   env_backend=env.get("RUBRICGYM_ENV_BACKEND", cls.env_backend))


def _json_object(environ: Mapping[str, str], name: str) -> dict[str, Any]:
    """The JSON object in the variable ``name`` (``{}`` when unset or empty), refused by name."""
    raw = environ.get(name, "") or "{}"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} must be a JSON object, got {raw[:80]!r}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object, got {raw[:80]!r}")  # noqa: TRY004  (a bad setting)
    return value


class RubricAgent(AgentInstanceBase):
    """One episode of a rubricgym environment as an OpenRLHF agent instance.

    Args:
        config: The environment (default: :meth:`AgentConfig.from_environ`).
        tokenizer: The policy's tokenizer, for its chat template (the executor passes it).
        on_done: Called with the finished :class:`Trajectory`.
    """

    def __init__(self, config: AgentConfig | None = None, tokenizer: Any = None, on_done: Any = None) -> None:
        self.config = config or AgentConfig.from_environ()
        self.tokenizer, self.on_done = tokenizer, on_done
        self.episode: TextEpisode | None = None

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        """Start the episode named by ``states["label"]`` (:func:`~wrappers.integrations.episode.task_prompt` JSON)."""
        spec = parse_task(states.get("label"))
        cfg = self.config
        self.episode = self._pool().acquire(style=cfg.style, max_steps=cfg.max_turns)
        text = await self.episode.areset(spec["task"], spec["seed"], spec["split"])
        return {**states, "observation": text if self.tokenizer is None else chat_start(self.tokenizer, text)}

    async def step(self, states: dict, **kwargs: Any) -> dict:
        """One decision: ``states["action_text"]`` is the model's response."""
        import torch

        ep = self.episode
        if ep is None:
            raise RuntimeError("reset() must come before step()")
        r = await ep.astep(states["action_text"])
        if r.done:
            feedback = ""
            self._finish()
        else:
            feedback = r.text if self.tokenizer is None else chat_next_turn(self.tokenizer, r.text)
        score = float(r.info.get("score", 0.0))
        return {
            "rewards": torch.tensor(r.reward),
            "scores": torch.tensor(score),
            "environment_feedback": feedback,
            "done": r.done,
            "extra_logs": {"valid": torch.tensor(float(r.step.valid)), "won": torch.tensor(float(r.info.get("won", False)))},
        }

    def stop(self) -> None:
        """End an episode OpenRLHF stopped before it was done (the sample's token budget ran
        out): it is recorded as truncated and its environment goes back to the pool.  Nothing
        happens after a finished episode."""
        if self.episode is not None:
            self.episode.stop()
            self._finish()

    def discard(self) -> None:
        """Drop the environment of an episode that failed (it is never reused)."""
        ep, self.episode = self.episode, None
        if ep is not None:
            self._pool().release(ep, retire=True)

    def _pool(self) -> EpisodePool:
        cfg = self.config
        return episode_pool(cfg.env, cfg.env_kwargs, workers=cfg.env_workers, backend=cfg.env_backend,
                            pool_options=cfg.env_pool_options)

    def _finish(self) -> None:
        """Record the ended episode and give its environment back to the pool."""
        ep, self.episode = self.episode, None
        assert ep is not None
        traj = ep.trajectory(slot=0)
        self._pool().release(ep)
        if self.on_done is not None:
            self.on_done(traj)


class AgentExecutor(MultiTurnAgentExecutor):
    """What OpenRLHF's ``--train.agent_func_path`` loads: the multi-turn executor over
    :class:`RubricAgent` instances that render prompts with the policy's tokenizer."""

    config: AgentConfig | None = None

    def __init__(self) -> None:
        super().__init__(RubricAgent)
        #: The process's most recent finished episodes (at most 10,000).
        self.last_trajectories: deque[Trajectory] = deque(maxlen=10_000)

    async def execute(self, prompt: Any, label: Any, sampling_params: Any, max_length: int, hf_tokenizer: Any,
                      llm_engine: Any, images: Any = None) -> dict:
        """OpenRLHF's multi-turn loop, with agents bound to ``hf_tokenizer``.

        OpenRLHF ends a sample when its episode is done or when the sample's ``max_length``
        tokens are used up; an episode ended by the budget is recorded as truncated (and its
        environment reused).  If the loop raises, the episode's environment is closed."""
        cfg = self.config or AgentConfig.from_environ()
        done: list[Trajectory] = []
        agents: list[RubricAgent] = []

        def make_agent() -> RubricAgent:
            agents.append(RubricAgent(cfg, hf_tokenizer, done.append))
            return agents[-1]

        # The base execute() builds its instance before its first await, so concurrent
        # executions each get the factory set here.
        self.agent_instance_cls = make_agent
        try:
            out = await super().execute(prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images)
        except BaseException:
            for agent in agents:
                agent.discard()
            raise
        for agent in agents:
            agent.stop()
        self.last_trajectories.extend(done)
        return out
