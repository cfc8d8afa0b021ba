"""skyrl-gym adapter: any rubricgym environment as a SkyRL ``BaseTextEnv``.

Install: ``pip install "rubricgym[skyrl]"`` (skyrl-gym 0.4).  Importing this module imports
``skyrl_gym`` and registers the environment class as ``"rubricgym"`` (:func:`register`); SkyRL
then builds one per sample with ``skyrl_gym.make(env_class, env_config=..., extras=...)``:

* ``env_config`` (SkyRL: ``environment.skyrl_gym.rubricgym``): ``env_id`` (default
  ``"WebShop-Rubric-v0"``), ``env_kwargs`` (for ``gym.make``), ``style``, ``list_actions``,
  ``compact``, ``max_turns``;
* ``extras`` (one dataset row): ``task``, ``seed``, ``split`` — the task to reset to; SkyRL's
  generator adds ``max_turns`` (its ``generator.max_turns``).

The turn limit is the smaller of ``env_config``'s and ``extras``' ``max_turns`` where both are
given (50 where neither is); the environment's own horizon also ends an episode.

``init`` ignores the dataset prompt and returns the environment's first decision prompt;
``step`` parses ``<action>…</action>``, steps the environment and returns the next decision
prompt as the new user message.  Every decision is recorded as a
:class:`~rubrics.trajectory.Step` (``env.steps``; also ``metadata["step"]``), so
:meth:`RubricTextEnv.trajectory` hands a finished episode to any rubricgym estimator.

Credit in SkyRL: its ``AdvantageEstimatorRegistry.register(name, fn)`` passes an estimator
the same limited arguments as verl's registry (token rewards, response mask, group index),
and its step-wise mode broadcasts the last step's advantage, so only outcome-level
estimators (GRPO, RLOO) fit there, e.g. wrapping
``wrappers.credit.flat.flat_advantages("rloo", group_id=index, traj_id=..., state_key=...,
reward=...)`` with one row per sample.  Step-level credit (GiGPO, GraphGPO, MCGPO) needs the
steps, which this environment records: compute it from :meth:`RubricTextEnv.trajectory`
groups in your own trainer step.  (The SkyRL trainer needs Python 3.12 and flash-attn; this
route is documented, not tested here.)

Example:
    >>> import tempfile, skyrl_gym
    >>> from agent_envs.webshop.testing import write_mini_catalogue
    >>> cfg = {"env_kwargs": {"catalogue": str(write_mini_catalogue(tempfile.mkdtemp())),
    ...                       "verify": False, "tagger": "lexicon"}}
    >>> env = skyrl_gym.make("rubricgym", env_config=cfg, extras={"task": 0})
    >>> conv, meta = env.init([{"role": "user", "content": "ignored"}])
    >>> meta["task_id"], conv[0]["role"]
    ('webshop/human/0', 'user')
    >>> out = env.step("<action>search[trail running shoes]</action>")
    >>> out["postprocessed_action"], out["done"], env.steps[0].valid
    ('search[trail running shoes]', False, True)
    >>> env.close()
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from rubrics.trajectory import Step, Trajectory
from wrappers.integrations.episode import TextEpisode

__all__ = ["ENV_CLASS", "RubricTextEnv", "register"]

#: The name SkyRL's ``env_class`` (dataset column) uses.
ENV_CLASS = "rubricgym"
_CONFIG_KEYS = ("env_id", "env_kwargs", "style", "list_actions", "compact", "max_turns")


def _plain(cfg: Any) -> dict[str, Any]:
    """An omegaconf DictConfig (SkyRL's config) or a mapping as a plain dict."""
    if cfg is None:
        return {}
    if hasattr(cfg, "items") and type(cfg).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return dict(OmegaConf.to_container(cfg, resolve=True))
    if not isinstance(cfg, Mapping):
        raise TypeError(f"env_config must be a mapping, got {type(cfg).__name__}")
    return dict(cfg)


def _turn_limit(configured: Any, generator: Any) -> int:
    """The smaller of ``env_config["max_turns"]`` and ``extras["max_turns"]`` (SkyRL's
    ``generator.max_turns``) where given; 50 where neither is."""
    limits = []
    for where, value in (("env_config['max_turns']", configured), ("extras['max_turns'] (generator.max_turns)", generator)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where} must be a positive int, got {value!r}")
        limits.append(value)
    return min(limits, default=50)


class RubricTextEnv(BaseTextEnv):
    """A rubricgym environment behind SkyRL's text-environment interface.

    Args:
        env_config: ``env_id``, ``env_kwargs``, ``style``, ``list_actions``, ``compact``,
            ``max_turns`` (see the module docstring).
        extras: The dataset row: ``task``, ``seed``, ``split``, and ``max_turns`` (SkyRL's
            generator sets it to ``generator.max_turns``).

    Raises:
        ValueError: a ``max_turns`` that is not a positive integer (naming where it came from).
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        cfg = _plain(env_config)
        unknown = set(cfg) - set(_CONFIG_KEYS)
        if unknown:
            raise ValueError(f"unknown rubricgym env_config keys {sorted(unknown)}; expected {', '.join(_CONFIG_KEYS)}")
        extras = dict(extras or {})
        self.max_turns = _turn_limit(cfg.get("max_turns"), extras.get("max_turns"))
        self.episode = TextEpisode(cfg.get("env_id", "WebShop-Rubric-v0"), cfg.get("env_kwargs") or {},
                                   style=cfg.get("style", "action_only"), list_actions=cfg.get("list_actions", True),
                                   compact=cfg.get("compact", False), max_steps=self.max_turns)
        self.task = {k: extras.get(k) for k in ("task", "seed", "split")}

    @property
    def steps(self) -> list[Step]:
        """The decisions of the episode so far."""
        return self.episode.steps

    def init(self, prompt: Any) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Reset to the row's task; the conversation is the environment's first decision prompt."""
        text = self.episode.reset(self.task["task"], self.task["seed"], self.task["split"])
        self.turns = 0
        task = self.episode.info.get("task") or {}
        return [{"role": "user", "content": text}], {"task_id": task.get("id"), "goal": self.episode.goal}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """One decision: parse, step the environment, record the :class:`Step`."""
        self.turns += 1
        r = self.episode.step(action)
        obs = [] if r.done else [{"role": "user", "content": r.text}]
        meta = {"step": r.step, "valid": r.step.valid, "task_reward": r.step.reward, "penalty": r.step.penalty,
                "won": self.episode.success, "score": float(r.info.get("score", 0.0))}
        return BaseTextEnvStepOutput(observations=obs, reward=r.reward, done=r.done, metadata=meta,
                                     postprocessed_action=r.step.action)

    def trajectory(self, slot: int = 0, task_id: Any = None) -> Trajectory:
        """The episode as a :class:`Trajectory` for rubricgym's estimators."""
        return self.episode.trajectory(slot, task_id)

    def get_metrics(self) -> dict[str, Any]:
        """Per-episode metrics: success, score, decisions, invalid share."""
        n = len(self.steps)
        return {"success": float(self.episode.success), "score": float(self.episode.info.get("score", 0.0)),
                "steps": n, "invalid_share": (sum(not s.valid for s in self.steps) / n) if n else 0.0}

    def close(self) -> None:
        """Close the rubricgym environment."""
        self.episode.close()


def register(env_class: str = ENV_CLASS) -> None:
    """Register :class:`RubricTextEnv` with skyrl_gym under ``env_class`` (idempotent)."""
    if env_class not in skyrl_gym.registry:
        skyrl_gym.register(id=env_class, entry_point=f"{__name__}:RubricTextEnv")


register()
