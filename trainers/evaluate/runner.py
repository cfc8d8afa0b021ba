"""``rubricgym eval``'s loop: every task of a panel, played by an agent, traced and summarised.

Every task is one group of one episode played by the project's one episode loop,
:meth:`GroupRunner.arun <agent_envs.rollout.GroupRunner.arun>` (at most ``concurrency`` in
flight, their environments in ``workers`` worker processes and reused task after task), so the
agent's requests (an inference server) and the environments' steps overlap and never block
each other.  Each decision is prompted afresh (goal, the last
``history_length`` turns, observation, admissible actions: :func:`agent_envs.agent.prompts.build_prompt`,
the trainer's wording) and answered as text (``<action>…</action>``) or as a tool call.

The run folder::

    run.json             the panel (name, hash, tasks), the agent and the settings
    episodes/00007.jsonl one line per decision (prompt, reply, action, valid, reward, rubric,
                         usage, latency_s, and a "problem" when a malformed reply counted as
                         an invalid action), then one "end" line (success, score, steps,
                         invalid, rubric, error, token sums, wall_s, latency_s)
    results.json         the summary (also printed; :mod:`trainers.evaluate.summary`)
    tasks.jsonl          one row per episode (task, success, score, steps, tokens, cost, timings)
    tasks.csv            the same rows, the rubric channels as columns

A trace stores at most ``settings.trace_chars`` characters of a reply, an action or a prompt
message; longer ones are cut with a marker giving their length (``[... truncated: N
characters in all]``), so a reply of many megabytes costs the folder kilobytes.

An episode's file is written whole when it ends (atomically), so an interrupted run resumes
without redoing finished episodes; an episode that ended in an agent error (an endpoint that
failed after its retries, or answered something that is not a chat completion) is counted as
an error and played again on resume.  A folder of another panel hash or another agent is
refused (``allow_hash_change`` takes a changed hash), and so is a damaged one, with the file
named (:mod:`trainers.evaluate.folder`).  Per-task results depend only on the task and the
agent, not on workers or concurrency (for deterministic agents: the baselines, a local model
or an endpoint at temperature 0 that is deterministic itself); the timings (``latency_s``,
``wall_s``) are the machine's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent_envs.agent.prompts import info_actions, info_goal
from agent_envs.agent.tools import TOOL_INSTRUCTION
from agent_envs.panels import Panel
from agent_envs.rollout import GroupRunner, Turn
from rubrics.trajectory import Step, Trajectory
from trainers.evaluate.agents import Agent, AgentError, Reply, TurnContext
from trainers.evaluate.folder import (
    EpisodeResult,
    RunFolderError,
    check_folder,
    read_trace,
    trace_path,
)
from trainers.evaluate.summary import summarize, write_task_files
from trainers.report import write_text_atomic

__all__ = ["EpisodeResult", "EvalSettings", "RunFolderError", "clip_text", "evaluate", "summarize"]


@dataclass(frozen=True)
class EvalSettings:
    """How the episodes are played (recorded in ``run.json``)."""

    workers: int = 1
    concurrency: int = 4
    limit: int | None = None
    max_steps: int | None = None
    seed: int = 0
    style: str = "action_only"
    history_length: int = 2
    list_actions: bool = True
    action_format: str = "text"
    system: str = ""
    trace_chars: int = 32_768


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)


def clip_text(text: str, limit: int) -> str:
    """``text``, or its first ``limit`` characters and a marker with its length.

    >>> clip_text("abcdef", 3)
    'abc[... truncated: 6 characters in all]'
    """
    return text if len(text) <= limit else f"{text[:limit]}[... truncated: {len(text)} characters in all]"


def _numeric(rubric: Mapping[str, Any]) -> dict[str, float]:
    return {str(k): float(v) for k, v in (rubric or {}).items() if isinstance(v, (bool, int, float))}


def _prompt(turn: Turn, settings: EvalSettings) -> list[dict[str, str]]:
    from agent_envs.agent.chat import build_messages
    from agent_envs.agent.prompts import build_prompt

    h = settings.history_length
    history = list(turn.history[-h:]) if h else []
    goal = info_goal(turn.info)
    text = build_prompt(goal, str(turn.observation), info_actions(turn.info), history, style=settings.style,
                        step=turn.t, list_actions=settings.list_actions)
    system = "\n".join(x for x in (settings.system, TOOL_INSTRUCTION if settings.action_format == "tools" else "") if x)
    return build_messages(text, system or None)


@dataclass
class _Trace:
    """One episode being played: the lines of its trace and what its end line needs."""

    first_info: dict[str, Any]
    info: dict[str, Any]
    lines: list[dict[str, Any]] = field(default_factory=list)
    pending: tuple[TurnContext, Reply, float] | None = None
    error: str | None = None
    started: float = field(default_factory=time.perf_counter)
    latencies: list[float] = field(default_factory=list)
    tokens: dict[str, int | None] = field(default_factory=lambda: {"prompt_tokens": None, "completion_tokens": None})

    def count(self, usage: Mapping[str, Any]) -> None:
        """Add a decision's token counts."""
        for key, total in list(self.tokens.items()):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                self.tokens[key] = (total or 0) + value


class _Episodes:
    """The agent as :meth:`GroupRunner.arun <agent_envs.rollout.GroupRunner.arun>`'s policy
    (one group of one episode per task to play), and the hooks that turn its steps into traces."""

    def __init__(self, panel: Panel, agent: Agent, settings: EvalSettings, out: Path, todo: Sequence[int],
                 on_end: Callable[[EpisodeResult], None]) -> None:
        self.panel, self.agent, self.settings, self.out, self.todo = panel, agent, settings, out, list(todo)
        self.on_end = on_end
        self.traces: dict[int, _Trace] = {}

    async def policy(self, turn: Turn) -> str | None:
        """The agent's action for this turn (``None``: the agent failed; the episode ends)."""
        from agent_envs.agent.prompts import format_action, reply_action

        index = self.todo[turn.group]
        trace = self.traces.setdefault(index, _Trace(dict(turn.info), dict(turn.info)))
        ctx = self._context(index, turn, trace.first_info)
        start = time.perf_counter()
        try:
            reply = await self.agent.decide(ctx)
        except AgentError as exc:
            trace.error = clip_text(str(exc), 4000)
            return None
        latency = round(time.perf_counter() - start, 4)
        trace.latencies.append(latency)
        trace.count(reply.usage)
        trace.pending = (ctx, reply, latency)
        return reply_action(reply.text if reply.action is None else format_action(reply.action), info_actions(turn.info))

    def _context(self, index: int, turn: Turn, first_info: Mapping[str, Any]) -> TurnContext:
        tools = None
        if self.settings.action_format == "tools":
            from agent_envs.agent.tools import tools_for

            tools = tools_for(info_actions(turn.info))
        return TurnContext(self.panel.hash, index, turn.t, _prompt(turn, self.settings), turn.info, first_info, tools)

    def on_step(self, turn: Turn, step: Step, info: Mapping[str, Any]) -> None:
        """One trace line per transition (``done`` is set on the last one when the episode ends;
        ``reward`` is the environment's: both return task reward + penalty, the step's two parts);
        texts longer than ``trace_chars`` are clipped (:func:`clip_text`)."""
        trace = self.traces[self.todo[turn.group]]
        ctx, reply, latency = trace.pending
        limit = self.settings.trace_chars
        messages = [{**m, "content": clip_text(str(m.get("content", "")), limit)} for m in ctx.messages]
        line = {"t": ctx.t, "messages": messages, "reply": clip_text(reply.text, limit),
                "action": clip_text(str(step.action), limit), "valid": step.valid,
                "reward": step.reward + step.penalty, "done": False, "rubric": info.get("rubric"),
                "usage": dict(reply.usage), "latency_s": latency}
        if reply.problem is not None:
            line["problem"] = reply.problem
        trace.lines.append(line)
        trace.info = dict(info)

    def on_group(self, group: int, trajectories: list[Trajectory]) -> None:
        """The episode ended: write its trace whole (atomically) and report its result."""
        index, traj = self.todo[group], trajectories[0]
        trace = self.traces.pop(index, None) or _Trace({}, {})
        if trace.lines and trace.error is None:
            trace.lines[-1]["done"] = True
        info = trace.info
        result = EpisodeResult(index, self.panel.task_ids[index], traj.success, traj.score, len(traj.steps),
                               sum(not s.valid for s in traj.steps), traj.truncated,
                               (info.get("task") or {}).get("type"), _numeric(info.get("rubric") or {}), trace.error,
                               **trace.tokens, wall_s=round(time.perf_counter() - trace.started, 4),
                               latency_s=trace.latencies)
        body = "".join(json.dumps(line, default=str) + "\n" for line in trace.lines)
        _write_atomic(trace_path(self.out, index), body + json.dumps({"end": True, **asdict(result)}) + "\n")
        self.on_end(result)


async def evaluate(panel: Panel, agent: Agent, out: str | Path, settings: EvalSettings, *,
                   allow_hash_change: bool = False,
                   on_episode: Callable[[EpisodeResult, bool], None] | None = None,
                   prices: tuple[float, float] | None = None) -> list[EpisodeResult]:
    """Play the panel's tasks (the first ``settings.limit``) with ``agent``; results in task order.

    ``on_episode(result, resumed)`` is called for every episode (those found finished too).
    ``prices`` (USD per million prompt and completion tokens) add the cost to ``results.json``
    and the per-task files.

    Raises:
        RunFolderError: ``out`` holds another panel's, agent's or panel hash's run, or a damaged
            file (named); nothing in the folder is changed then.
    """
    out, start = Path(out), time.perf_counter()
    n = len(panel.tasks) if settings.limit is None else min(settings.limit, len(panel.tasks))
    header = {"panel": panel.name, "hash": panel.hash, "versions": dict(panel.versions), "tasks": n,
              "env_id": panel.spec.env_id, "env_kwargs": dict(panel.spec.env_kwargs),
              "agent": agent.describe(), "settings": asdict(settings)}
    check_folder(out, header, allow_hash_change)
    results: list[EpisodeResult | None] = [read_trace(trace_path(out, i), i) for i in range(n)]
    _write_atomic(out / "run.json", json.dumps(header, indent=2, default=str) + "\n")
    for r in results:
        if r is not None and on_episode is not None:
            on_episode(r, True)
    todo = [i for i in range(n) if results[i] is None]

    def ended(result: EpisodeResult) -> None:
        results[result.index] = result
        if on_episode is not None:
            on_episode(result, False)

    await _play(panel, _Episodes(panel, agent, settings, out, todo, ended), settings, todo)
    done = [r for r in results if r is not None]
    summary = summarize(done, panel, prices=prices, wall_s=time.perf_counter() - start, played=len(todo))
    _write_atomic(out / "results.json", json.dumps(summary, indent=2) + "\n")
    write_task_files(out, done, prices)
    return done


async def _play(panel: Panel, play: _Episodes, settings: EvalSettings, todo: Sequence[int]) -> None:
    """Play the tasks ``todo`` through one :class:`GroupRunner`."""
    split = panel.spec.reset_options.get("split")
    with GroupRunner(panel.spec.env_id, panel.spec.env_kwargs, workers=settings.workers,
                     max_steps=settings.max_steps) as runner:
        await runner.arun([panel.tasks[i] for i in todo], play.policy, group_size=1, seeds=settings.seed,
                          options=None if split is None else {"split": split}, on_step=play.on_step,
                          groups_in_flight=settings.concurrency, on_group=play.on_group)
