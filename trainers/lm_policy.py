"""The language-model policy of the trainer's rollouts: P task groups × G siblings, played by
:class:`agent_envs.rollout.GroupRunner` with the model answering every live environment in one
batch per turn.

Every turn, the prompts of all environments that are still running are built (SPEC §7),
encoded with the model's chat template and answered in one batch:

* ``generate`` mode — the backend samples free text, which is parsed into an action; a
  response without an ``<action>`` block or with an inadmissible action is an invalid step
  (the environment applies the penalty).
* ``choose`` mode — each admissible action's response ``<action>a</action><eos>`` is scored by
  its log-probability under the policy; an action is sampled from softmax(score / T).

Siblings of a group reset with the same task and seed, so they start from identical states.
The episodes are played by :class:`~agent_envs.rollout.GroupRunner`, the one episode loop;
the language model is its policy. Each decision becomes a
:class:`~rubrics.trajectory.Step` (the response text in ``Step.extra["response"]``) and a
training row (the step's own prompt ids and response ids).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agent_envs.agent.chat import build_messages
from agent_envs.agent.prompts import build_prompt, format_action, info_goal, reply_action
from agent_envs.rollout import EnvPool, GroupRunner, Turn
from rubrics.trajectory import Step, Trajectory
from trainers.generation import GenerationBackend, score_candidates

__all__ = ["RolloutResult", "RolloutSettings", "RowTokens", "TaskRef", "candidate_ids", "chat_ids", "collect_rollouts", "decision_prompt",
           "fill_slots"]

log = logging.getLogger(__name__)

#: Sent to the environment when a response has no ``<action>`` block (always inadmissible).


@dataclass(frozen=True)
class TaskRef:
    """One task to roll out: ``task`` (index or id), ``split``, and the episode ``seed``."""

    task: Any
    split: str | None
    seed: int


@dataclass
class RowTokens:
    """The training row of one decision: its prompt ids and response ids; in ``choose``
    mode also every admissible action's response ids (``candidates``, as they were scored)
    and the index of the chosen one (``chosen``; -1 when the action was generated)."""

    prompt_ids: list[int]
    response_ids: list[int]
    candidates: list[list[int]] = field(default_factory=list)
    chosen: int = -1


@dataclass
class RolloutSettings:
    """How to roll out (a subset of :class:`trainers.config.TrainConfig`)."""

    action_mode: str = "generate"
    prompt_style: str = "think"
    history_length: int = 2
    list_actions: bool = True
    compact_prompt: bool = False
    system_prompt: str = ""
    max_prompt_tokens: int = 2048
    max_response_tokens: int = 512
    max_steps: int = 50
    temperature: float = 1.0
    top_p: float = 1.0
    batch_rows: int = 64

    @classmethod
    def from_config(cls, cfg: Any, *, temperature: float | None = None) -> RolloutSettings:
        """Take the matching fields of a :class:`~trainers.config.TrainConfig`."""
        return cls(
            action_mode=cfg.prompt.action_mode, prompt_style=cfg.prompt.prompt_style, history_length=cfg.prompt.history_length,
            list_actions=cfg.prompt.list_actions, compact_prompt=cfg.prompt.compact_prompt, system_prompt=cfg.prompt.system_prompt,
            max_prompt_tokens=cfg.prompt.max_prompt_tokens,
            max_response_tokens=cfg.prompt.max_response_tokens, max_steps=cfg.env.max_steps,
            temperature=cfg.rollout.temperature if temperature is None else temperature, top_p=cfg.rollout.top_p,
            batch_rows=cfg.rollout.rollout_batch_size,
        )


@dataclass
class RolloutResult:
    """Groups of sibling trajectories plus their training rows and episode metadata.

    Attributes:
        groups: ``groups[g][i]`` is sibling ``i`` of task group ``g``.
        rows: ``rows[g][i][t]`` the tokens of step ``t``.
        meta: ``meta[g][i]`` per-episode facts (task type, invalid steps, ...).
        stats: Timings and token counts of the whole rollout.
    """

    groups: list[list[Trajectory]]
    rows: list[list[list[RowTokens]]]
    meta: list[list[dict[str, Any]]]
    stats: dict[str, float] = field(default_factory=dict)


def chat_ids(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> list[int]:
    """The prompt token ids of chat ``messages`` in the tokenizer's template, ending with the
    assistant header."""
    ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return list(ids)


def _encode_prompt(tokenizer: Any, text: str, max_tokens: int, system: str = "") -> list[int]:
    ids = chat_ids(tokenizer, build_messages(text, system or None))
    if len(ids) > max_tokens:
        ids = ids[-max_tokens:]
    return ids


def decision_prompt(tokenizer: Any, goal: str, observation: str, info: dict[str, Any],
                    history: Sequence[tuple[str, str]], settings: RolloutSettings) -> list[int]:
    """The prompt ids of one decision (SPEC §7): goal, the most recent ``history_length``
    (observation, action) pairs, the observation and the admissible actions of ``info``,
    in the model's chat template. Rollouts and the warm start build prompts only here."""
    adm = list(info.get("admissible_actions") or [])
    recent = list(history)[-settings.history_length:] if settings.history_length else []
    text = build_prompt(goal, observation, adm, recent, style=settings.prompt_style, step=len(history),
                        list_actions=settings.list_actions, compact=settings.compact_prompt)
    return _encode_prompt(tokenizer, text, settings.max_prompt_tokens, settings.system_prompt)


class _Recorder:
    """The trainer's side of one :meth:`GroupRunner.run <agent_envs.rollout.GroupRunner.run>`:
    the language-model policy, and what it records per decision (training rows, token
    counts) and per episode (task type, final ``info``)."""

    def __init__(self, model: Any, tokenizer: Any, backend: GenerationBackend | None, settings: RolloutSettings) -> None:
        self.model, self.tokenizer, self.backend, self.settings = model, tokenizer, backend, settings
        self.rows: dict[tuple[int, int], list[RowTokens]] = {}
        self.first: dict[tuple[int, int], Mapping[str, Any]] = {}
        self.last: dict[tuple[int, int], Mapping[str, Any]] = {}
        self.tokens = {"gen_tokens": 0.0, "prompt_tokens": 0.0}

    def __call__(self, turns: Sequence[Turn]) -> list[tuple[str, dict[str, str]]]:
        goals = [info_goal(t.info) for t in turns]
        prompts = [decision_prompt(self.tokenizer, g, str(t.observation), t.info, t.history, self.settings)
                   for g, t in zip(goals, turns)]
        actions, decided, texts = _decide(self.model, self.tokenizer, self.backend, turns, goals, prompts, self.settings)
        for t, row in zip(turns, decided):
            self.rows.setdefault((t.group, t.slot), []).append(row)
            self.first.setdefault((t.group, t.slot), t.info)
        self.tokens["gen_tokens"] += sum(len(r.response_ids) for r in decided)
        self.tokens["prompt_tokens"] += sum(len(p) for p in prompts)
        return [(a, {"response": text}) for a, text in zip(actions, texts)]

    def on_step(self, turn: Turn, step: Step, info: Mapping[str, Any]) -> None:
        self.last[(turn.group, turn.slot)] = info

    def meta(self, key: tuple[int, int], traj: Trajectory, ref: TaskRef) -> dict[str, Any]:
        first = self.first.get(key, {})
        return {"task_type": (first.get("task") or {}).get("type"), "invalid": sum(not s.valid for s in traj.steps),
                "steps": len(traj.steps), "task": ref.task, "rubric": _final_rubric(self.last.get(key, first))}


def collect_rollouts(
    model: Any,
    tokenizer: Any,
    backend: GenerationBackend | None,
    pool: EnvPool,
    tasks: Sequence[TaskRef],
    group_size: int,
    settings: RolloutSettings,
) -> RolloutResult:
    """Roll out ``group_size`` siblings on each task, batching the policy across live envs.

    The episodes are played by :class:`~agent_envs.rollout.GroupRunner` (the project's one
    episode loop) on ``pool``; the language model is its policy.

    Args:
        model: The policy (used for scoring in ``choose`` mode).
        tokenizer: Its tokenizer (chat template, decoding).
        backend: Generation backend (``generate`` mode).
        pool: Environments; needs at least ``len(tasks) * group_size`` slots.
        tasks: One :class:`TaskRef` per group, all of one split.
        group_size: Siblings per task.
        settings: Rollout settings.
    """
    n = len(tasks) * group_size
    if pool.n is not None and n > pool.n:
        raise ValueError(f"the environment pool has {pool.n} slots; {n} are needed")
    splits = {ref.split for ref in tasks}
    if len(splits) > 1:
        raise ValueError(f"one rollout plays one split, got {sorted(map(str, splits))}")
    split = next(iter(splits), None)
    t0 = time.perf_counter()
    recorder = _Recorder(model, tokenizer, backend, settings)
    runner = GroupRunner(pool, max_steps=settings.max_steps)
    groups = runner.run([ref.task for ref in tasks], recorder, group_size=group_size, seeds=[ref.seed for ref in tasks],
                        options=None if split is None else {"split": split}, on_step=recorder.on_step)
    rows = [[recorder.rows.get((g, i), []) for i in range(group_size)] for g in range(len(tasks))]
    meta = [[recorder.meta((g, i), groups[g][i], ref) for i in range(group_size)] for g, ref in enumerate(tasks)]
    stats = {**runner.stats, **recorder.tokens, "rollout_s": time.perf_counter() - t0}
    return RolloutResult(groups, rows, meta, stats)


def _final_rubric(info: dict[str, Any]) -> dict[str, float]:
    """The numeric, non-diagnostic rubric channels an episode ended with (progress metrics)."""
    from rubrics.channels import diagnostic_channels

    status = info.get("rubric") or {}
    skip = diagnostic_channels()
    out: dict[str, float] = {}
    for name, value in status.items():
        if name in skip or isinstance(value, str):
            continue
        try:
            out[str(name)] = float(value)
        except (TypeError, ValueError):
            continue
    return out


_SLOT = re.compile(r"<[^<>]*>")


def fill_slots(action: str, goal: str) -> str:
    """``choose`` mode cannot write free text, so a templated admissible action such as
    WebShop's ``search[<your query>]`` is filled with the task's goal sentence (a documented
    simplification: the query is not learned in ``choose`` mode).

    >>> fill_slots("search[<your query>]", "Find a red mug, under 10 dollars")
    'search[find a red mug, under 10 dollars]'
    >>> fill_slots("click[buy now]", "x")
    'click[buy now]'
    """
    if "[<" not in action:
        return action
    return _SLOT.sub(lambda _m: " ".join(goal.lower().split()), action, count=1)


def candidate_ids(tokenizer: Any, admissible: Sequence[str], goal: str) -> list[list[int]]:
    """The response ids ``choose`` mode scores for each admissible action:
    ``<action>a</action>`` (slots filled with :func:`fill_slots`) followed by EOS. The
    rollouts and the warm start's expert rows both build their candidates here."""
    eos = tokenizer.eos_token_id
    return [tokenizer.encode(format_action(fill_slots(str(a), goal)), add_special_tokens=False) + [eos] for a in admissible]


def _decide(model: Any, tokenizer: Any, backend: GenerationBackend | None, turns: Sequence[Turn], goals: Sequence[str],
            prompts: list[list[int]], settings: RolloutSettings) -> tuple[list[str], list[RowTokens], list[str]]:
    """Actions, training rows and response texts for the live episodes' turns."""
    n = len(turns)
    actions: list[str] = [""] * n
    rows = [RowTokens(prompts[k], []) for k in range(n)]
    texts: list[str] = [""] * n
    to_generate = list(range(n))
    if settings.action_mode == "choose":
        to_generate = []
        idx, cands, cand_ids = [], [], []
        for k, (turn, goal) in enumerate(zip(turns, goals)):
            adm = [fill_slots(str(a), goal) for a in (turn.info.get("admissible_actions") or [])]
            if not adm:
                to_generate.append(k)
                continue
            idx.append(k)
            cands.append(adm)
            cand_ids.append(candidate_ids(tokenizer, adm, goal))
        if idx:
            scores = score_candidates(model, [prompts[k] for k in idx], cand_ids,
                                      pad_id=tokenizer.pad_token_id, max_rows=settings.batch_rows)
            for k, adm, ids, s in zip(idx, cands, cand_ids, scores):
                probs = torch.softmax(s.double() / settings.temperature, dim=0)
                j = int(torch.multinomial(probs, 1).item())
                actions[k], texts[k] = adm[j], format_action(adm[j])
                rows[k] = RowTokens(prompts[k], ids[j], ids, j)
    if to_generate:
        if backend is None:
            raise ValueError("generate mode needs a generation backend")
        gen = backend.generate([prompts[k] for k in to_generate], temperature=settings.temperature,
                               top_p=settings.top_p, max_new_tokens=settings.max_response_tokens)
        for k, resp in zip(to_generate, gen):
            text = tokenizer.decode(resp, skip_special_tokens=True)
            action = reply_action(text, [str(a) for a in (turns[k].info.get("admissible_actions") or [])])
            actions[k], rows[k], texts[k] = action, RowTokens(prompts[k], list(resp)), text
    return actions, rows, texts
