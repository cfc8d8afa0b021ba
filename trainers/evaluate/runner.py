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
    episodes/00007.jsonl one line per decision (prompt, reply, action, valid, reward, rubric),
                         then one "end" line (success, score, steps, invalid, rubric, error)
    results.json         the summary (also printed)

An episode's file is written whole when it ends (atomically), so an interrupted run resumes
without redoing finished episodes; an episode that ended in an agent error (an endpoint that
failed after its retries) is counted as an error and played again on resume.  A folder of
another panel hash or another agent is refused (``allow_hash_change`` takes a changed hash).
Per-task results depend only on the task and the agent, not on workers or concurrency (for
deterministic agents: the baselines, a local model or an endpoint at temperature 0 that is
deterministic itself).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent_envs.agent.prompts import info_actions, info_goal
from agent_envs.agent.tools import TOOL_INSTRUCTION
from agent_envs.panels import Panel
from agent_envs.rollout import GroupRunner, Turn
from rubrics.trajectory import Step, Trajectory
from trainers import stats
from trainers.evaluate.agents import Agent, AgentError, Reply, TurnContext
from trainers.evaluation import episode_metrics
from trainers.report import write_text_atomic

__all__ = ["EpisodeResult", "EvalSettings", "RunFolderError", "evaluate", "summarize"]

class RunFolderError(ValueError):
    """A run folder that belongs to another panel hash or agent, or a corrupt trace file."""


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


@dataclass
class EpisodeResult:
    """One finished episode (the "end" line of its trace)."""

    index: int
    task_id: str
    success: bool
    score: float
    steps: int
    invalid: int
    truncated: bool
    task_type: str | None = None
    rubric: dict[str, float] = field(default_factory=dict)
    error: str | None = None


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)


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
    pending: tuple[TurnContext, Reply] | None = None
    error: str | None = None


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
        try:
            reply = await self.agent.decide(ctx)
        except AgentError as exc:
            trace.error = str(exc)
            return None
        trace.pending = (ctx, reply)
        return reply_action(reply.text if reply.action is None else format_action(reply.action), info_actions(turn.info))

    def _context(self, index: int, turn: Turn, first_info: Mapping[str, Any]) -> TurnContext:
        tools = None
        if self.settings.action_format == "tools":
            from agent_envs.agent.tools import tools_for

            tools = tools_for(info_actions(turn.info))
        return TurnContext(self.panel.hash, index, turn.t, _prompt(turn, self.settings), turn.info, first_info, tools)

    def on_step(self, turn: Turn, step: Step, info: Mapping[str, Any]) -> None:
        """One trace line per transition (``done`` is set on the last one when the episode ends;
        ``reward`` is the environment's: both return task reward + penalty, the step's two parts)."""
        trace = self.traces[self.todo[turn.group]]
        ctx, reply = trace.pending
        trace.lines.append({"t": ctx.t, "messages": list(ctx.messages), "reply": reply.text, "action": step.action,
                            "valid": step.valid, "reward": step.reward + step.penalty, "done": False,
                            "rubric": info.get("rubric"), "usage": dict(reply.usage)})
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
                               (info.get("task") or {}).get("type"), _numeric(info.get("rubric") or {}), trace.error)
        body = "".join(json.dumps(line, default=str) + "\n" for line in trace.lines)
        _write_atomic(self.out / "episodes" / f"{index:05d}.jsonl", body + json.dumps({"end": True, **asdict(result)}) + "\n")
        self.on_end(result)


def _finished(path: Path) -> EpisodeResult | None:
    """The result of a complete trace (``None``: absent, interrupted, or ended in an error)."""
    if not path.is_file():
        return None
    try:
        last = path.read_text(encoding="utf-8").rstrip("\n").rsplit("\n", 1)[-1]
        end = json.loads(last)
    except (OSError, json.JSONDecodeError) as exc:
        raise RunFolderError(f"{path}: not a trace file ({exc}); delete it to play the episode again") from exc
    if not end.get("end") or end.get("error"):
        return None
    end.pop("end")
    return EpisodeResult(**end)


def _check_folder(out: Path, header: Mapping[str, Any], allow_hash_change: bool) -> None:
    path = out / "run.json"
    if not path.is_file():
        return
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RunFolderError(f"{path}: unreadable ({exc})") from exc
    if old.get("panel") != header["panel"] or old.get("agent", {}).get("name") != header["agent"]["name"]:
        raise RunFolderError(f"{out} holds a run of {old.get('panel')} by {old.get('agent', {}).get('name')}; "
                             f"use another folder for {header['panel']} by {header['agent']['name']}")
    if old.get("hash") != header["hash"] and not allow_hash_change:
        raise RunFolderError(f"{out} was played on panel hash {str(old.get('hash'))[:12]}, this machine's "
                             f"{header['panel']} has {header['hash'][:12]} (other games, goals or engine); "
                             "use another folder, or pass --allow-hash-change to mix them")


async def evaluate(panel: Panel, agent: Agent, out: str | Path, settings: EvalSettings, *,
                   allow_hash_change: bool = False,
                   on_episode: Callable[[EpisodeResult, bool], None] | None = None) -> list[EpisodeResult]:
    """Play the panel's tasks (the first ``settings.limit``) with ``agent``; results in task order.

    ``on_episode(result, resumed)`` is called for every episode (those found finished too).
    """
    out = Path(out)
    n = len(panel.tasks) if settings.limit is None else min(settings.limit, len(panel.tasks))
    header = {"panel": panel.name, "hash": panel.hash, "versions": dict(panel.versions), "tasks": n,
              "env_id": panel.spec.env_id, "env_kwargs": dict(panel.spec.env_kwargs),
              "agent": agent.describe(), "settings": asdict(settings)}
    _check_folder(out, header, allow_hash_change)
    _write_atomic(out / "run.json", json.dumps(header, indent=2, default=str) + "\n")
    results: list[EpisodeResult | None] = [_finished(out / "episodes" / f"{i:05d}.jsonl") for i in range(n)]
    for r in results:
        if r is not None and on_episode is not None:
            on_episode(r, True)
    todo = [i for i in range(n) if results[i] is None]

    def ended(result: EpisodeResult) -> None:
        results[result.index] = result
        if on_episode is not None:
            on_episode(result, False)

    play = _Episodes(panel, agent, settings, out, todo, ended)
    split = panel.spec.reset_options.get("split")
    with GroupRunner(panel.spec.env_id, panel.spec.env_kwargs, workers=settings.workers,
                     max_steps=settings.max_steps) as runner:
        await runner.arun([panel.tasks[i] for i in todo], play.policy, group_size=1, seeds=settings.seed,
                          options=None if split is None else {"split": split}, on_step=play.on_step,
                          groups_in_flight=settings.concurrency, on_group=play.on_group)
    done = [r for r in results if r is not None]
    _write_atomic(out / "results.json", json.dumps(summarize(done, panel), indent=2) + "\n")
    return done


def summarize(results: Sequence[EpisodeResult], panel: Panel) -> dict[str, Any]:
    """Success (Wilson 95 % interval), score and steps (Student-t 95 % intervals, clipped to
    [0, 1] and to the steps observed), the
    invalid-action rate, success per task type, mean final rubric channels, errors, and the
    panel's name and hash."""
    n = len(results)
    rows = [{"success": r.success, "score": r.score, "steps": r.steps, "invalid": r.invalid,
             "task_type": r.task_type, "rubric": r.rubric} for r in results]
    out: dict[str, Any] = {"panel": panel.name, "hash": panel.hash, "episodes": n,
                           "errors": sum(r.error is not None for r in results)}
    if not n:
        return out
    wins = sum(r.success for r in results)
    out.update(episode_metrics(rows))
    out["success_ci"] = list(stats.proportion_interval(wins, n))
    score = stats.mean_interval([r.score for r in results], bounds=(0.0, 1.0))
    steps = stats.mean_interval([r.steps for r in results], bounds=(min(r.steps for r in results),
                                                                    max(r.steps for r in results)))
    out["score_ci"] = [x if not math.isnan(x) else None for x in score]
    out["steps_ci"] = [x if not math.isnan(x) else None for x in steps]
    return out
