"""rubricgym inside verl (0.9.x): credit estimators, a step-level trainer mode, an env agent loop.

Install: ``pip install "rubricgym[verl]"`` in an environment of its own (verl caps transformers
below 5.11).  The extra declares an entry point in verl's group ``verl.plugins``, so a bare
``import verl`` (in the driver and in every Ray actor) imports this module, and importing it
registers, idempotently:

* every estimator of :func:`wrappers.credit.available_estimators` as verl advantage estimator
  ``rubricgym_<name>`` (``algorithm.adv_estimator=rubricgym_rloo``).  verl's stock
  ``compute_advantage`` hands a registered estimator only ``token_level_rewards``,
  ``response_mask``, ``config`` and ``index`` (the prompt ``uid``), so there the credit is
  *outcome-level*: each row is a one-step trajectory whose reward is its summed token reward,
  grouped by ``uid`` (:func:`outcome_advantages`);
* the v1 trainer mode ``rubricgym_sync`` (``trainer.v1.trainer_mode=rubricgym_sync``):
  :class:`RubricgymSyncTrainer`, verl's synchronous trainer whose advantage stage runs a
  ``rubricgym_<name>`` estimator *per step* over the rows in TransferQueue
  (:func:`step_advantages`): group = ``uid``, trajectory = (``uid``, session), step = the
  output index of the row key ``{uid}_{session}_{index}``, and the step itself (state and
  next-state keys, reward, penalty, valid, matching keys, ...) from ``extra_fields``;
* the agent loop ``rubricgym_env`` (:class:`RubricgymEnvLoop`): plays any rubricgym Gymnasium
  environment and returns one ``AgentLoopOutput`` per decision whose
  ``extra_fields["rubricgym"]`` carries the step (:func:`encode_row`).

Estimator parameters come from ``algorithm.rubricgym`` (``+algorithm.rubricgym.gamma=0.95``),
a mapping passed to :func:`wrappers.credit.get_estimator`; verl-agent's GiGPO/GraphGPO switches
are among them: ``enable_similarity=True, similarity_thresh=τ`` is ``similarity=τ``, GraphGPO's
``normalize_distance`` is ``normalize_distance`` (``+algorithm.rubricgym.similarity=0.95``).

The trainer mode overrides ``PPOTrainer._compute_advantage``, a private method of verl's v1
trainer: the extra pins ``verl>=0.9.1,<0.10``.  ``docs/integrations/verl.md`` has the GPU launch
command (untested here: no GPU, no vLLM/SGLang on the CPU test machine).

Example (outcome level, what ``compute_advantage`` calls):

    >>> import numpy as np, torch
    >>> rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 0.0]])
    >>> adv, _ = outcome_advantages("rloo", rewards, torch.ones(3, 2), np.array(["p", "p", "p"]))
    >>> adv[:, 0].tolist()
    [1.0, -0.5, -0.5]
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

try:
    import torch
    import transfer_queue as tq
    from omegaconf import OmegaConf
    from tensordict import TensorDict
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopBase,
        AgentLoopMetrics,
        AgentLoopOutput,
        register,
    )
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer
except ModuleNotFoundError as _exc:  # pragma: no cover - exercised only without verl
    raise ModuleNotFoundError(
        f"wrappers.integrations.verl needs verl 0.9 and its trainer modules ({_exc}); install them in an "
        "environment of their own: pip install torch==2.13.0 && pip install -e '.[verl]'",
        name=_exc.name,
    ) from _exc

from rubrics.trajectory import Step, Trajectory
from wrappers.credit import available_estimators
from wrappers.credit.flat import FlatCredit, flat_advantages, flat_credit
from wrappers.integrations.episode import TextEpisode, aepisode_pool, check_pool_options

__all__ = [
    "AGENT_LOOP",
    "PREFIX",
    "ROW_FIELD",
    "TRAINER_MODE",
    "RubricgymEnvLoop",
    "RubricgymSyncTrainer",
    "decode_row",
    "encode_row",
    "estimator_name",
    "outcome_advantages",
    "register_estimators",
    "step_advantages",
    "step_credit",
    "write_dataset",
]

log = logging.getLogger(__name__)

#: verl names of our estimators: ``rubricgym_<name>``.
PREFIX = "rubricgym_"
#: The v1 trainer mode and the agent-loop name registered here.
TRAINER_MODE = "rubricgym_sync"
AGENT_LOOP = "rubricgym_env"
#: The ``extra_fields`` key that carries a row's step (see :func:`encode_row`).
ROW_FIELD = "rubricgym"


# --- parameters --------------------------------------------------------------------------------
def estimator_name(adv_estimator: Any) -> str | None:
    """Our estimator behind a verl name: ``"rubricgym_gigpo"`` -> ``"gigpo"``, else ``None``.

    >>> estimator_name("rubricgym_gigpo"), estimator_name("grpo")
    ('gigpo', None)
    """
    name = getattr(adv_estimator, "value", adv_estimator)
    if not isinstance(name, str) or not name.startswith(PREFIX):
        return None
    ours = name[len(PREFIX):]
    if ours not in available_estimators():
        raise ValueError(f"unknown rubricgym estimator {name!r}; available: "
                         f"{', '.join(PREFIX + n for n in available_estimators())}")
    return ours


def _params(config: Any) -> dict[str, Any]:
    """``algorithm.rubricgym`` (estimator keyword parameters) as a plain dict."""
    if config is None:
        return {}
    params = config.get("rubricgym", None) if hasattr(config, "get") else getattr(config, "rubricgym", None)
    if params is None:
        return {}
    if OmegaConf.is_config(params):
        params = OmegaConf.to_container(params, resolve=True)
    if not isinstance(params, Mapping):
        raise TypeError(f"algorithm.rubricgym must be a mapping of estimator parameters, got {type(params).__name__}")
    return dict(params)


# --- outcome level: verl's advantage-estimator registry ------------------------------------------
def outcome_advantages(name: str, token_level_rewards: Any, response_mask: Any, index: Any,
                       params: Mapping[str, Any] | None = None) -> tuple[Any, Any]:
    """Advantages of estimator ``name`` with each row a one-step trajectory of its ``uid`` group.

    The row's reward (and raw score) is its summed token reward; the state key is the group,
    so step-level estimators reduce to their episode-level form.  Returns ``(advantages,
    returns)``, both the row advantage broadcast over ``response_mask``, as verl expects.
    """
    if index is None:
        raise ValueError(f"{PREFIX}{name} groups rows by uid, but compute_advantage passed no index")
    scores = token_level_rewards.detach().sum(dim=-1).double().cpu().numpy()
    groups = [str(g) for g in index]
    adv = flat_advantages(name, params=params, group_id=groups, traj_id=list(range(len(groups))),
                          state_key=groups, reward=scores, score=scores.tolist())
    out = torch.as_tensor(adv, dtype=token_level_rewards.dtype, device=token_level_rewards.device)
    out = out.unsqueeze(-1) * response_mask
    return out, out


def _outcome_fn(name: str) -> Any:
    def fn(token_level_rewards, response_mask, config=None, index=None, **_ignored):
        return outcome_advantages(name, token_level_rewards, response_mask, index, _params(config))

    fn.__name__ = f"{PREFIX}{name}"
    fn.__doc__ = f"rubricgym's {name!r} estimator at outcome level (wrappers.integrations.verl)."
    fn.rubricgym_estimator = name
    return fn


def register_estimators() -> list[str]:
    """Register every rubricgym estimator as ``rubricgym_<name>``; returns the verl names.

    Idempotent; call it again after :func:`wrappers.credit.register_estimator` to add yours.
    A name already taken by another function is an error (verl's own check).
    """
    names = []
    for name in available_estimators():
        key = PREFIX + name
        current = core_algos.ADV_ESTIMATOR_REGISTRY.get(key)
        if getattr(current, "rubricgym_estimator", None) != name:
            core_algos.register_adv_est(key)(_outcome_fn(name))
        names.append(key)
    return names


# --- rows: one step per AgentLoopOutput ----------------------------------------------------------
def encode_row(step: Step, *, task_id: Hashable, score: float, success: bool, truncated: bool = False) -> str:
    """A step and its trajectory's outcome as JSON text, for ``extra_fields["rubricgym"]``.

    TransferQueue serialises non-tensor fields with msgpack, which turns tuples and
    frozensets into lists (in hash order); the tagged JSON of
    :meth:`~rubrics.trajectory.Trajectory.to_dict` keeps keys exact and canonical.

    >>> text = encode_row(Step(("room", frozenset({"a"})), "look", reward=0.0), task_id=3, score=0.0, success=False)
    >>> decode_row(text)[0].state_key
    ('room', frozenset({'a'}))
    """
    return _row_head(task_id, score, success, truncated) + _step_text(step) + "]}"


def _step_text(step: Step) -> str:
    """A step's part of :func:`encode_row` (the costly part: the agent loop writes it as the
    step is played, and only the outcome once the episode is over)."""
    body = Trajectory(task_id=None, slot=0, steps=[step]).to_dict()["steps"][0]
    return json.dumps(body, ensure_ascii=False, allow_nan=False)


def _row_head(task_id: Hashable, score: float, success: bool, truncated: bool) -> str:
    """:func:`encode_row` up to its step: the trajectory's fields, then ``"steps": [``."""
    head = Trajectory(task_id=task_id, slot=0, score=float(score), success=bool(success),
                      truncated=bool(truncated)).to_dict()
    del head["steps"]
    return json.dumps(head, ensure_ascii=False, allow_nan=False)[:-1] + ', "steps": ['


def decode_row(text: str) -> tuple[Step, dict[str, Any]]:
    """Inverse of :func:`encode_row`: ``(step, {"task_id", "score", "success", "truncated"})``."""
    traj = Trajectory.from_dict(json.loads(text))
    if len(traj.steps) != 1:
        raise ValueError(f"a rubricgym row holds one step, got {len(traj.steps)}")
    return traj.steps[0], {"task_id": traj.task_id, "score": traj.score, "success": traj.success,
                           "truncated": traj.truncated}


def _split_key(key: str) -> tuple[str, int, int]:
    parts = str(key).rsplit("_", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        raise ValueError(f"row key {key!r} is not verl's '{{uid}}_{{session}}_{{index}}'")
    return parts[0], int(parts[1]), int(parts[2])


def step_credit(estimator: str, keys: Sequence[str], extra_fields: Sequence[Mapping[str, Any]],
                params: Mapping[str, Any] | None = None) -> FlatCredit:
    """Step-level credit of verl rows (``keys`` ``{uid}_{session}_{index}``, one step each).

    Each row's ``extra_fields[ROW_FIELD]`` is :func:`encode_row` text; the rows go through
    :func:`wrappers.credit.flat.flat_credit` with group = uid, trajectory = (uid, session),
    step index = index and slot = session.

    Raises:
        ValueError: a key not in verl's format, or a row without the rubricgym step (the
            message names the row and the agent loop that writes it).
    """
    uids, sessions, index, steps, trajs = [], [], [], [], []
    for r, (key, extra) in enumerate(zip(keys, extra_fields, strict=True)):
        uid, session, i = _split_key(key)
        text = (extra or {}).get(ROW_FIELD)
        if not isinstance(text, str):
            raise ValueError(  # noqa: TRY004  (a missing field, not a wrong type)
                f"row {r} ({key}): extra_fields[{ROW_FIELD!r}] is missing; rows for step-level credit come "
                f"from the {AGENT_LOOP!r} agent loop (or an agent loop that stores encode_row text)")
        step, traj = decode_row(text)
        uids.append(uid)
        sessions.append(session)
        index.append(i)
        steps.append(step)
        trajs.append(traj)
    names = sorted({k for s in steps for k in s.keys}, key=str)
    return flat_credit(
        estimator, params=params, group_id=uids, traj_id=list(zip(uids, sessions)), step_index=index,
        slot=sessions, state_key=[s.state_key for s in steps], next_state_key=[s.next_state_key for s in steps],
        reward=[s.reward for s in steps], penalty=[s.penalty for s in steps], valid=[s.valid for s in steps],
        action=[s.action for s in steps], action_key=[s.action_key for s in steps],
        observation=[s.observation for s in steps], feedback=[s.feedback for s in steps],
        rubric=[s.rubric for s in steps], extra=[s.extra for s in steps],
        keys={k: [s.keys.get(k) for s in steps] for k in names},
        score=[t["score"] for t in trajs], success=[t["success"] for t in trajs],
        truncated=[t["truncated"] for t in trajs], task_id=[t["task_id"] for t in trajs],
    )


def _check_supported(algorithm: Any) -> None:
    if algorithm.get("use_kl_in_reward", False):
        raise ValueError(f"{TRAINER_MODE}: algorithm.use_kl_in_reward is not supported with step-level rubricgym credit "
                         "(the KL is per token, the credit per step); use actor_rollout_ref.actor.use_kl_loss=True")
    rc = algorithm.get("rollout_correction", None) or {}
    if (rc.get("rollout_is") or rc.get("rollout_rs")) and not rc.get("bypass_mode", False):
        raise ValueError(f"{TRAINER_MODE}: decoupled rollout correction (algorithm.rollout_correction.rollout_is/"
                         "rollout_rs without bypass_mode) is not supported with step-level rubricgym credit")


def step_advantages(batch: Any, estimator: str, params: Mapping[str, Any] | None = None,
                    metrics: dict[str, Any] | None = None) -> Any:
    """The advantage stage over TransferQueue rows: read ``response_mask`` and ``extra_fields``
    of ``batch`` (a ``KVBatchMeta``), run :func:`step_credit`, write ``advantages`` and
    ``returns`` (the row advantage on each response token, zero where the mask is 0) back.
    verl's synthetic padding rows (tag ``is_padding``, added to make the batch divisible by the
    data-parallel size) are left out of the credit and the ``rubricgym/*`` metrics and get 0.

    Returns the ``KVBatchMeta`` of the write, as verl's own stage does.
    """
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                           select_fields=["response_mask", "extra_fields"])
    mask = data["response_mask"]
    keys, extra = list(batch.keys), list(data["extra_fields"])
    # verl's synthetic padding rows (tag is_padding: copies of a real row, response mask 0) get no credit
    tags = list(batch.tags or ()) or [{}] * len(keys)
    real = [r for r, tag in enumerate(tags) if not (tag or {}).get("is_padding", False)]
    credit = step_credit(estimator, [keys[r] for r in real], [extra[r] for r in real], params)
    row_adv = np.zeros(len(keys))
    row_adv[real] = credit.advantages
    rows = mask.unbind() if mask.is_nested else list(mask)
    adv = torch.nested.as_nested_tensor(
        [m.to(torch.float32) * float(a) for m, a in zip(rows, row_adv, strict=True)], layout=torch.jagged)
    if metrics is not None:
        metrics.update({
            "rubricgym/rows": float(len(real)),
            "rubricgym/groups": float(len(credit.results)),
            "rubricgym/pairs": float(len(credit.pairs)),
            "rubricgym/advantage_mean": float(np.mean(credit.advantages)) if real else 0.0,
            "rubricgym/advantage_abs_mean": float(np.mean(np.abs(credit.advantages))) if real else 0.0,
        })
    fields = TensorDict({"advantages": adv, "returns": adv.clone()}, batch_size=len(rows))
    return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)


@register_trainer(TRAINER_MODE)
class RubricgymSyncTrainer(PPOTrainerSync):
    """verl's synchronous v1 trainer with step-level rubricgym credit.

    With ``algorithm.adv_estimator=rubricgym_<name>`` the advantage stage is
    :func:`step_advantages` (rows from the ``rubricgym_env`` agent loop); any other estimator
    runs verl's own stage unchanged.
    """

    def _compute_advantage(self, batch, metrics):
        name = estimator_name(self.config.algorithm.adv_estimator)
        if name is None:
            return super()._compute_advantage(batch, metrics)
        _check_supported(self.config.algorithm)
        return step_advantages(batch, name, _params(self.config.algorithm), metrics)


# --- the agent loop -------------------------------------------------------------------------------
def _episode_spec(kwargs: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Merge the loop's defaults with the dataset row's ``extra_info["rubricgym"]`` (JSON text
    or a mapping, see :func:`write_dataset`)."""
    spec = dict(defaults)
    raw = (kwargs.get("extra_info") or {}).get(ROW_FIELD) if isinstance(kwargs.get("extra_info"), Mapping) else None
    if isinstance(raw, str):
        raw = json.loads(raw)
    if raw is not None and not isinstance(raw, Mapping):
        raise TypeError(f"extra_info[{ROW_FIELD!r}] must be JSON text or a mapping, got {type(raw).__name__}")
    unknown = set(raw or {}) - set(defaults)
    if unknown:
        raise ValueError(f"extra_info[{ROW_FIELD!r}] has unknown fields {sorted(unknown)}; known: {sorted(defaults)}")
    spec.update(raw or {})
    if not spec.get("env_id"):
        raise ValueError(f"the {AGENT_LOOP!r} agent loop needs an env_id (agent-loop config or extra_info[{ROW_FIELD!r}])")
    cap = spec["max_steps"]
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise ValueError(f"max_steps must be a positive int or None, got {cap!r}")
    workers = spec["env_workers"]
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"env_workers must be a non-negative int, got {workers!r}")
    if spec["env_backend"] not in ("process", "ray", "remote"):
        raise ValueError(f"env_backend must be 'process', 'ray' or 'remote', got {spec['env_backend']!r}")
    check_pool_options(spec["env_pool_options"])
    return spec


class RubricgymEnvLoop(AgentLoopBase):
    """verl agent loop ``rubricgym_env``: one episode of a rubricgym environment per session.

    Each decision is prompted afresh (goal, the last ``history_length`` turns, observation and
    admissible actions, :func:`agent_envs.agent.prompts.build_prompt`), generated by verl's server
    manager, parsed (the ``<action>`` block) and stepped; the loop returns one
    ``AgentLoopOutput`` per decision, ``extra_fields["rubricgym"]`` = :func:`encode_row` of the
    recorded :class:`~rubrics.trajectory.Step`.  The last output's ``reward_score`` is the
    episode's task return (verl copies it to the session's other outputs; per-step rewards
    travel in ``extra_fields``).  Siblings (sessions of one ``uid``) share task and seed.

    Keyword arguments (an agent-loop config file gives them, ``agent_loop_config_path``; a
    dataset row's ``extra_info["rubricgym"]`` overrides them per prompt): ``env_id``,
    ``env_kwargs``, ``task``, ``seed``, ``split``, ``max_steps``, ``history_length``,
    ``style`` (``"think"``/``"action_only"``), ``list_actions``, ``compact``, ``system``,
    ``env_workers``, ``env_backend``, ``env_ray_options``, ``env_pool_options``.

    The environments never run on the event loop: they live in ``env_workers`` worker
    processes (default 1; ``env_backend="ray"``: Ray actors on verl's own Ray cluster, which a
    multi-node job spreads over its nodes; ``env_ray_options`` go to ``actor.options``,
    default ``{"num_cpus": 1}``) of an :class:`~agent_envs.pool.EnvPool` shared by the worker's sessions,
    and every reset and step is awaited (:meth:`TextEpisode.astep
    <wrappers.integrations.episode.TextEpisode.astep>`), so other sessions' generation requests
    go on meanwhile.  ``env_workers=0`` keeps them in this process on one engine thread.
    ``env_pool_options`` passes more of the pool's options (:data:`~wrappers.integrations.episode.POOL_OPTIONS`):
    ``{"timeout": 600}`` fails a session whose environment hangs, ``{"worker_idle": true}`` lets
    this worker's event loop take a core from its environments at once when they share the cores.
    """

    DEFAULTS: ClassVar[dict[str, Any]] = {"env_id": None, "env_kwargs": {}, "task": None, "seed": None, "split": None,
                                "max_steps": None, "history_length": 2, "style": "think", "list_actions": True,
                                "compact": False, "system": "", "env_workers": 1, "env_backend": "process",
                                "env_ray_options": None, "env_pool_options": None}

    def __init__(self, *args, **kwargs):
        settings = {k: kwargs.pop(k) for k in list(kwargs) if k in self.DEFAULTS}
        kwargs.pop("tools", None)
        super().__init__(*args, **kwargs)
        self.defaults = {**self.DEFAULTS, **{k: (OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v)
                                             for k, v in settings.items()}}
        self.response_length = self.rollout_config.response_length

    def _prompt(self, ep: TextEpisode, spec: Mapping[str, Any]) -> list[dict[str, str]]:
        from agent_envs.agent.chat import build_messages
        from agent_envs.agent.prompts import build_prompt, info_actions

        h = int(spec["history_length"] or 0)
        history = [(s.observation, s.action) for s in ep.steps[-h:]] if h else []
        adm = info_actions(ep.info)
        text = build_prompt(ep.goal, ep.obs, adm, history, style=spec["style"], step=len(ep.steps),
                            list_actions=spec["list_actions"], compact=spec["compact"])
        return build_messages(text, spec["system"] or None)

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> list[AgentLoopOutput]:
        # verl starts a batch's sessions in one turn of its event loop, each building its loop
        # object there (hydra's instantiate, ~3 ms of CPU each); the episode's setup waits for the
        # next turn, and the first sessions' start of the environment pool (process spawns) runs
        # in a thread of its own, never on the loop
        await asyncio.sleep(0)
        spec = _episode_spec(kwargs, self.defaults)
        episodes = await aepisode_pool(spec["env_id"], spec["env_kwargs"], workers=spec["env_workers"],
                                       backend=spec["env_backend"], ray_options=spec["env_ray_options"],
                                       pool_options=spec["env_pool_options"])
        ep = episodes.acquire(style=spec["style"], list_actions=spec["list_actions"], compact=spec["compact"],
                              max_steps=spec["max_steps"])
        try:
            await ep.areset(task=spec["task"], seed=spec["seed"], split=spec["split"])
            outputs = await self._play(ep, spec, sampling_params)
            traj = ep.trajectory(slot=int(kwargs.get("session_id", 0)))
        except BaseException:
            episodes.release(ep, retire=True)  # an environment that raised is not reused
            raise
        episodes.release(ep)
        head = _row_head(traj.task_id, traj.score, traj.success, traj.truncated)
        for out in outputs:  # encode_row of each step: its step text was written as it was played
            out.extra_fields[ROW_FIELD] = head + out.extra_fields[ROW_FIELD] + "]}"
        outputs[-1].reward_score = traj.outcome
        outputs[-1].extra_fields["reward_extra_info"] = {"score": traj.score, "success": float(traj.success),
                                                         "steps": float(len(traj.steps))}
        return outputs

    async def _play(self, ep: TextEpisode, spec: Mapping[str, Any], sampling_params: dict[str, Any]) -> list[AgentLoopOutput]:
        request_id = uuid.uuid4().hex  # sticky: one session stays on one server
        outputs = []
        while not ep.done:
            prompt_ids = await self.ct_build_initial_tokens(self._prompt(ep, spec))
            t0 = time.perf_counter()
            gen = await self.server_manager.generate(request_id=request_id, prompt_ids=prompt_ids,
                                                     sampling_params=sampling_params)
            gen_s = time.perf_counter() - t0
            merged, mask, logprobs = await self.ct_merge_assistant_token(
                prompt_ids, gen.token_ids, [], [] if gen.log_probs else None,
                assistant_logprobs=gen.log_probs if gen.log_probs else None)
            response_ids = merged.token_ids[-len(mask):] if mask else []
            prompt_ids = merged.token_ids[: len(merged.token_ids) - len(mask)]
            played = await ep.astep(self.tokenizer.decode(gen.token_ids, skip_special_tokens=True))
            n = self.response_length
            outputs.append(AgentLoopOutput(
                prompt_ids=prompt_ids, response_ids=response_ids[:n], response_mask=mask[:n],
                response_logprobs=logprobs[:n] if logprobs else None, num_turns=2,
                metrics=AgentLoopMetrics(generate_sequences=gen_s,
                                         num_preempted=gen.num_preempted if gen.num_preempted is not None else -1),
                extra_fields={"turn_scores": [], "tool_rewards": [], ROW_FIELD: _step_text(played.step)},
            ))
        return outputs


register(AGENT_LOOP)(RubricgymEnvLoop)


# --- datasets -------------------------------------------------------------------------------------
def write_dataset(path: str, env_id: str, tasks: Sequence[Any], *, env_kwargs: Mapping[str, Any] | None = None,
                  seed: int | None = 0, split: str | None = None, **settings: Any) -> int:
    """Write a verl prompt dataset (parquet) with one row per task for the ``rubricgym_env`` loop.

    Each row has ``agent_name = "rubricgym_env"``, a ``prompt`` naming the task (the loop builds
    its own prompts; verl's dataset needs one) and ``extra_info = {"index", "rubricgym"}``, the
    latter JSON text with ``env_id``, ``env_kwargs``, ``task``, ``seed``, ``split`` and any
    loop ``settings`` (``max_steps``, ``history_length``, ...).  Returns the number of rows.
    """
    import pandas as pd

    unknown = set(settings) - set(RubricgymEnvLoop.DEFAULTS)
    if unknown:
        raise ValueError(f"unknown agent-loop settings {sorted(unknown)}; known: {sorted(RubricgymEnvLoop.DEFAULTS)}")
    rows = []
    for i, task in enumerate(tasks):
        spec = {"env_id": env_id, "env_kwargs": dict(env_kwargs or {}), "task": task, "seed": seed, "split": split,
                **settings}
        rows.append({
            "data_source": f"rubricgym/{env_id}",
            "agent_name": AGENT_LOOP,
            "prompt": [{"role": "user", "content": f"{env_id} task {task}"}],
            "reward_model": {"style": "rule", "ground_truth": ""},
            "extra_info": {"index": i, ROW_FIELD: json.dumps(spec, sort_keys=True)},
        })
    pd.DataFrame(rows).to_parquet(path)
    return len(rows)


register_estimators()
