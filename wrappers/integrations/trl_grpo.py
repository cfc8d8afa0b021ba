"""TRL integration: GRPO on rubricgym environments with rubricgym's credit, per token.

Install: ``pip install "rubricgym[trl]"`` (TRL 1.16; the trainer relies on TRL's private
``_compute_loss`` taking ``(B, T)`` advantages and ``_generate_single_turn``, hence the pin
``trl>=1.16,<1.17``).

* :func:`env_rollout` makes TRL's ``rollout_func``: each sample is one multi-turn episode.
  The completion is the whole conversation after the first prompt — the model's responses
  (``env_mask`` 1) interleaved with the environment's next decision prompts in the chat
  template (``env_mask`` 0, so no loss there).  Responses come from the trainer's own
  generation (``transformers.generate`` or vLLM, whatever the config selects).  The episode's
  decisions travel with the sample as :class:`~rubrics.trajectory.Trajectory` objects.
* :class:`RubricGRPOTrainer` is a ``GRPOTrainer`` whose advantages come from any rubricgym
  estimator (``"gigpo"``, ``"graphgpo"``, ``"mcgpo"``'s advantages, ...): the
  ``num_generations`` samples of a prompt are a sibling group, and each response token gets
  its decision's step advantage.  TRL's reward functions still run (default:
  :func:`episode_return`) for its logs.
* :func:`task_dataset` is the prompt dataset: one row per task; :meth:`EnvRollout.tasks` lists
  the tasks the environment's split holds (``rubricgym train``'s order), so the rows never
  name a task the split lacks.

Example (the GPU command is in docs/integrations/trl.md)::

    from trl import GRPOConfig
    from wrappers.integrations.trl_grpo import RubricGRPOTrainer, env_rollout, task_dataset

    rollout = env_rollout("ALFWorld-Rubric-v0", {"split": "train"}, max_turns=30)
    trainer = RubricGRPOTrainer(
        model="Qwen/Qwen2.5-1.5B-Instruct", estimator="gigpo",
        args=GRPOConfig(output_dir="out", num_generations=8, max_completion_length=64),
        train_dataset=task_dataset(rollout.tasks(500), seed=0), rollout_func=rollout)
    trainer.train()
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer

from agent_envs.agent.chat import chat_next_turn, chat_start
from rubrics.trajectory import Trajectory
from wrappers.credit.base import Estimator, get_estimator
from wrappers.integrations.episode import (
    ActionParser,
    TextEpisode,
    check_pool_options,
    reset_all,
    split_tasks,
    step_all,
    task_prompt,
)

__all__ = ["DEFAULT_MAX_TOKENS", "EnvRollout", "RubricGRPOTrainer", "env_rollout", "episode_return",
           "log_episode_metrics", "task_dataset"]

TRAJECTORY, SPANS, RETURN = "rubricgym_trajectory", "rubricgym_spans", "rubricgym_return"

#: :class:`EnvRollout`'s default bound on an episode's prompt + completion tokens.
DEFAULT_MAX_TOKENS = 8192


def task_dataset(tasks: Iterable[Any], seed: int | None = None, split: str | None = None) -> Any:
    """A ``datasets.Dataset`` with one ``prompt`` per task (:func:`~wrappers.integrations.episode.task_prompt` JSON)."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [task_prompt(t, seed, split) for t in tasks]})


def episode_return(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """TRL reward function: each episode's summed environment reward (task reward + penalties).

    It also logs ``rubricgym/success`` and ``rubricgym/invalid_share`` through TRL's public
    ``log_metric`` (:func:`log_episode_metrics`; a custom reward function can call that too)."""
    if callable(kwargs.get("log_metric")) and TRAJECTORY in kwargs:
        log_episode_metrics(kwargs["log_metric"], kwargs[TRAJECTORY])
    return [float(r) for r in kwargs[RETURN]]


def log_episode_metrics(log_metric: Any, trajectories: Sequence[Trajectory]) -> None:
    """Log the episodes' success share and invalid-action share through TRL's ``log_metric``
    (a reward function's keyword argument): one value per episode and per step, so TRL's mean
    over all processes is the batch's share."""
    for t in trajectories:
        log_metric("rubricgym/success", float(bool(t.success)))
        for step in t.steps:
            log_metric("rubricgym/invalid_share", float(not step.valid))


def _prompt_text(prompt: Any) -> Any:
    """The task spec of a dataset prompt (a string, or the last message of a conversation)."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], Mapping):
        return prompt[-1].get("content")
    return prompt


class EnvRollout:
    """TRL ``rollout_func``: plays one episode per prompt, multi-turn, with ``env_mask``.

    Args:
        env: A Gymnasium id or a zero-argument factory (one environment per concurrent sample,
            kept between calls).
        env_kwargs: Keyword arguments for ``gym.make``.
        max_turns: Decisions per episode at most.
        max_tokens: Bound on prompt + completion tokens of an episode (default 8192; ``None``:
            only the model's context ``max_position_embeddings``, which also bounds any value
            given): an episode stops (truncated) before a turn of ``max_completion_length``
            tokens could pass it.
        style, list_actions, compact: The decision prompt (SPEC §7).
        parser: ``parser(response, info) -> action`` (default: the ``<action>`` block).
        env_workers: Worker processes the environments live in (an
            :class:`~agent_envs.pool.EnvPool`): each turn's resets and steps run in parallel
            over them instead of one after another in the trainer process (0: in this process).
        env_pool_options: More :class:`~agent_envs.pool.EnvPool` options, any of
            :data:`~wrappers.integrations.episode.POOL_OPTIONS` (e.g. ``{"worker_idle": True}``).
    """

    def __init__(self, env: Any, env_kwargs: Mapping[str, Any] | None = None, *, max_turns: int = 30,
                 max_tokens: int | None = DEFAULT_MAX_TOKENS, style: str = "action_only", list_actions: bool = True,
                 compact: bool = False, parser: ActionParser | None = None, env_workers: int = 0,
                 env_pool_options: Mapping[str, Any] | None = None) -> None:
        from agent_envs.pool import EnvPool

        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive int, got {max_turns!r}")
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
            raise ValueError(f"max_tokens must be a positive int or None, got {max_tokens!r}")
        self.max_turns, self.max_tokens = max_turns, max_tokens
        self.env, self.env_kwargs = env, dict(env_kwargs or {})
        self.pool = EnvPool(env, env_kwargs, workers=env_workers, **check_pool_options(env_pool_options))
        self.episode_kwargs = {"style": style, "list_actions": list_actions, "compact": compact, "parser": parser,
                               "max_steps": max_turns}
        self.episodes: list[TextEpisode] = []

    def _episodes(self, n: int) -> list[TextEpisode]:
        while len(self.episodes) < n:
            self.episodes.append(TextEpisode(self.pool.env_handle(len(self.episodes)), **self.episode_kwargs))
        return self.episodes[:n]

    def close(self) -> None:
        """Close the environments and stop their workers."""
        self.pool.close()

    def tasks(self, n: int | None = None, split: str | None = None) -> list[Any]:
        """The first ``n`` tasks (default: all) of the environment's split, for :func:`task_dataset`
        (:func:`~wrappers.integrations.episode.split_tasks`; a ValueError when the split has fewer)."""
        return split_tasks(self.env, self.env_kwargs, n, split)

    def token_limit(self, trainer: Any) -> int | None:
        """The episode's token bound: ``max_tokens``, and never past the model's context."""
        config = getattr(getattr(trainer, "model", None), "config", None)
        context = getattr(config, "max_position_embeddings", None)
        limits = [x for x in (self.max_tokens, context) if isinstance(x, int) and not isinstance(x, bool)]
        return min(limits) if limits else None

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, Any]:
        tok = trainer.processing_class
        tok = getattr(tok, "tokenizer", tok)  # a processor wraps its tokenizer
        eos_ids = set(getattr(trainer, "eos_token_ids", None) or [tok.eos_token_id])
        eps = self._episodes(len(prompts))
        prompt_ids = [tok.encode(chat_start(tok, text), add_special_tokens=False)
                      for text in reset_all(eps, [_prompt_text(p) for p in prompts])]
        comp: list[list[int]] = [[] for _ in eps]
        mask: list[list[int]] = [[] for _ in eps]
        logps: list[list[float]] = [[] for _ in eps]
        spans: list[list[tuple[int, int]]] = [[] for _ in eps]
        have_logps = True
        limit = self.token_limit(trainer)
        reserve = int(getattr(trainer, "max_completion_length", None) or 0)  # the next turn's tokens
        for _turn in range(self.max_turns):
            live = [k for k, ep in enumerate(eps) if not ep.done]
            if not _any_live(trainer, len(live)):
                break
            # every process generates each turn (vLLM server mode and ZeRO-3 are collective)
            query = [prompt_ids[k] + comp[k] for k in live] or [prompt_ids[0]]
            ids_list, lp_list = trainer._generate_single_turn(query, None, {}, 1)
            have_logps = have_logps and lp_list is not None
            ids_list = [list(ids) for ids in ids_list]
            results = step_all([eps[k] for k in live], [tok.decode(ids, skip_special_tokens=True) for ids in ids_list])
            for k, ids, lp, r in zip(live, ids_list, lp_list or [None] * len(live), results):
                start = len(comp[k])
                comp[k] += ids
                mask[k] += [1] * len(ids)
                logps[k] += list(lp) if lp is not None else [0.0] * len(ids)
                spans[k].append((start, len(comp[k])))
                if r.done:
                    continue
                ended = bool(ids) and ids[-1] in eos_ids
                env_ids = tok.encode(chat_next_turn(tok, r.text, after_eos=ended), add_special_tokens=False)
                comp[k] += env_ids
                mask[k] += [0] * len(env_ids)
                logps[k] += [0.0] * len(env_ids)
                if limit is not None and len(prompt_ids[k]) + len(comp[k]) + reserve >= limit:
                    eps[k].stop()
        trajs = [ep.trajectory(slot=0) for ep in eps]
        return {"prompt_ids": prompt_ids, "completion_ids": comp, "logprobs": logps if have_logps else None,
                "env_mask": mask, TRAJECTORY: trajs, SPANS: spans,
                RETURN: [sum(s.row_reward for s in t.steps) for t in trajs]}


def _any_live(trainer: Any, n_live: int) -> bool:
    acc = getattr(trainer, "accelerator", None)
    if acc is None or acc.num_processes == 1:
        return n_live > 0
    return bool(acc.gather(torch.tensor([n_live], device=acc.device)).sum().item() > 0)


def env_rollout(env: Any, env_kwargs: Mapping[str, Any] | None = None, **kwargs: Any) -> EnvRollout:
    """A TRL ``rollout_func`` over ``env`` (see :class:`EnvRollout` for the options)."""
    return EnvRollout(env, env_kwargs, **kwargs)


def token_advantages(step_adv: Sequence[Sequence[float]], spans: Sequence[Sequence[tuple[int, int]]],
                     length: int) -> torch.Tensor:
    """(B, length) advantages: each decision's value over its response tokens, 0 elsewhere.

    >>> token_advantages([[1.0, -2.0]], [[(0, 2), (4, 5)]], 6).tolist()
    [[1.0, 1.0, 0.0, 0.0, -2.0, 0.0]]
    """
    out = torch.zeros(len(spans), length, dtype=torch.float32)
    for b, (adv, sp) in enumerate(zip(step_adv, spans)):
        if len(adv) != len(sp):
            raise ValueError(f"sample {b}: {len(adv)} step advantages for {len(sp)} response spans")
        for a, (s, e) in zip(adv, sp):
            out[b, s:e] = float(a)
    return out


class RubricGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` with rubricgym's step-level credit (per token) over rubricgym episodes.

    Args:
        model, reward_funcs, *args, **kwargs: As for ``GRPOTrainer`` (``reward_funcs``
            defaults to :func:`episode_return`; pass ``rollout_func=env_rollout(...)``).
        estimator: A registered estimator name or an :class:`Estimator` (default ``"gigpo"``).
        estimator_params: Keyword parameters for a named estimator.

    After each generation, :attr:`last_credit` holds the sibling ``groups`` (all processes),
    the estimator's ``results``, and this process's ``advantages`` tensor, response ``spans``
    and ``completion_ids`` (unpadded).
    """

    def __init__(self, model: Any, reward_funcs: Any = None, *args: Any, estimator: str | Estimator = "gigpo",
                 estimator_params: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        if isinstance(estimator, str):
            self.estimator = get_estimator(estimator, **dict(estimator_params or {}))
        elif isinstance(estimator, Estimator) and not estimator_params:
            self.estimator = estimator
        else:
            raise TypeError("estimator must be a registered name (with estimator_params) or an Estimator")
        if kwargs.get("rollout_func") is None:
            raise ValueError("RubricGRPOTrainer needs rollout_func=env_rollout(...) (the episodes carry the steps)")
        self.last_credit: dict[str, Any] = {}
        super().__init__(model, [episode_return] if reward_funcs is None else reward_funcs, *args, **kwargs)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        if TRAJECTORY not in inputs[0]:
            raise ValueError(f"the rollout_func must return {TRAJECTORY!r} and {SPANS!r} (use env_rollout)")
        mode = "train" if self.model.training else "eval"
        size = self.num_generations if mode == "train" else self.num_generations_eval
        trajs = gather_object([inp[TRAJECTORY] for inp in inputs])
        groups = _sibling_groups(trajs, size)
        results = self.estimator(groups)
        per_sample = [a for res in results for a in res.advantages]
        start = self.accelerator.process_index * len(inputs)
        mine = per_sample[start:start + len(inputs)]
        adv = token_advantages(mine, [inp[SPANS] for inp in inputs], out["completion_ids"].size(1))
        out["advantages"] = adv.to(out["completion_ids"].device)
        kept = out["completion_mask"].bool()
        self.last_credit = {"groups": groups, "results": results, "advantages": out["advantages"],
                            "spans": [inp[SPANS] for inp in inputs],
                            "completion_ids": [row[m].tolist() for row, m in zip(out["completion_ids"], kept)]}
        return out


def _sibling_groups(trajs: Sequence[Trajectory], size: int) -> list[list[Trajectory]]:
    """Consecutive ``size`` samples (one prompt's generations) as one sibling group, slots 0..size-1."""
    if len(trajs) % size:
        raise ValueError(f"{len(trajs)} episodes do not split into groups of num_generations={size}")
    groups = []
    for g in range(0, len(trajs), size):
        chunk = trajs[g:g + size]
        tids = {t.task_id for t in chunk}
        if len(tids) != 1:
            raise ValueError(f"samples {g}..{g + size - 1} should be generations of one task, got tasks {sorted(map(str, tids))}")
        groups.append([Trajectory(t.task_id, i, t.steps, t.score, t.success, t.truncated) for i, t in enumerate(chunk)])
    return groups
