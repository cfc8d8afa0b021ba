"""Per-step prompts and response parsing: the agent's text interface (SPEC §7).

The policy sees the task, the current observation, (optionally) the admissible actions and,
after the first step, the most recent (observation, action) pairs.  It answers either with
reasoning in ``<think>…</think>`` followed by ``<action>…</action>`` (``style="think"``) or
with the action block alone (``style="action_only"``).  The wording is our own.

Example:
    >>> p = build_prompt("put a mug in the sink", "You see a mug 1.", ["take mug 1", "look"],
    ...                  history=[], style="action_only")
    >>> "put a mug in the sink" in p and "take mug 1" in p
    True
    >>> parse_action("<think>the mug first</think><action> take mug 1 </action>", ["take mug 1", "look"])
    ('take mug 1', True)
    >>> parse_action("no tags here", ["look"])
    ('no tags here', False)
    >>> reply_action("no tags here", ["look"])
    '<no action>'
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["NO_ACTION", "STYLES", "build_prompt", "compact_observation", "format_action", "info_actions",
           "info_goal", "parse_action", "reply_action"]

STYLES = ("think", "action_only")

#: The action sent to the environment when a reply names none (the environment rejects it).
NO_ACTION = "<no action>"

_INSTRUCTIONS = {
    "think": (
        "First think about what to do next, step by step, inside <think> </think>. "
        "Then give exactly one action from the list inside <action> </action>."
    ),
    "action_only": "Reply with exactly one action from the list, written as <action>the action</action>, and nothing else.",
}
# the same instructions when no list is shown (choose mode scores the admissible actions itself)
_INSTRUCTIONS_NO_LIST = {
    "think": (
        "First think about what to do next, step by step, inside <think> </think>. "
        "Then give exactly one action inside <action> </action>."
    ),
    "action_only": "Reply with exactly one action, written as <action>the action</action>, and nothing else.",
}

_BANNER_RE = re.compile(r"^\s*-=.*=-\s*$")

_ACTION_RE = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)


def build_prompt(
    goal: str,
    observation: str,
    admissible: Sequence[str],
    history: Sequence[tuple[str, str]],
    *,
    style: str = "think",
    step: int | None = None,
    list_actions: bool = True,
    max_chars: int | None = None,
    compact: bool = False,
    instruction: str | None = None,
) -> str:
    """The user message for one decision.

    Args:
        goal: The task sentence.
        observation: What the agent sees now.
        admissible: The admissible actions (listed when ``list_actions``).
        history: The most recent ``(observation, action)`` pairs, oldest first (already
            cut to the configured length).
        style: ``"think"`` or ``"action_only"``.
        step: Number of actions taken so far (defaults to ``len(history)``).
        list_actions: Show the admissible actions.
        max_chars: If the prompt is longer, drop the history (oldest first) to fit.
        compact: A shorter prompt with the same fields: no opening sentence (give it as a
            system message instead) and observations passed through
            :func:`compact_observation`.
        instruction: The closing instruction instead of the style's (e.g. the tool-call one,
            :data:`agent_envs.agent.tools.TOOL_INSTRUCTION`).
    """
    if style not in STYLES:
        raise ValueError(f"style must be one of {', '.join(STYLES)}; got {style!r}")
    history = list(history)
    if compact:
        observation = compact_observation(observation, goal)
        history = [(compact_observation(o, goal), a) for o, a in history]
    while True:
        text = _render(goal, observation, admissible, history, style, step, list_actions, compact, instruction)
        if max_chars is None or len(text) <= max_chars or not history:
            return text
        history = history[1:]


def compact_observation(observation: str, goal: str = "") -> str:
    r"""An observation without decoration: banner lines such as ``-= Welcome … =-``, a line
    that only repeats the goal (``Your task is to: <goal>``), blank lines, and runs of
    spaces are dropped.

    >>> compact_observation("-= Welcome =-\n\nYou see a mug 1.\n\nYour task is to: put a mug in sink.", "put a mug in sink.")
    'You see a mug 1.'
    """
    g = " ".join(goal.split()).lower().rstrip(".")
    kept = []
    for line in observation.splitlines():
        line = " ".join(line.split())
        if not line or _BANNER_RE.match(line):
            continue
        if g and line.lower().rstrip(".").endswith(g) and line.lower().startswith("your task is to"):
            continue
        kept.append(line)
    return "\n".join(kept)


def _render(goal: str, observation: str, admissible: Sequence[str], history: list[tuple[str, str]],
            style: str, step: int | None, list_actions: bool, compact: bool = False,
            instruction: str | None = None) -> str:
    taken = len(history) if step is None else step
    lines = [] if compact else ["You control an agent in a text-based environment."]
    lines.append(f"Goal: {goal.strip()}")
    if history:
        lines.append(f"Actions taken so far: {taken}. The last {len(history)} turn(s):")
        first = taken - len(history) + 1
        for k, (obs, act) in enumerate(history):
            lines.append(_shown(f"[turn {first + k}] saw:", obs))
            lines.append(f"[turn {first + k}] did: {act.strip()}")
    lines.append(_shown(f"Now (turn {taken + 1}) you see:", observation))
    if list_actions:
        lines.append("Possible actions: " + " | ".join(a.strip() for a in admissible))
    lines.append(instruction or (_INSTRUCTIONS if list_actions else _INSTRUCTIONS_NO_LIST)[style])
    return "\n".join(lines)


def _shown(lead: str, observation: str) -> str:
    r"""``lead`` and the observation: on the same line when it is one line, else from the next
    line on, so that a multi-line observation (a grid) keeps its rows aligned; blank lines before
    it and whitespace at its end go, its first row keeps its indentation.

    >>> _shown("saw:", "  You see a mug 1. ")
    'saw: You see a mug 1.'
    >>> _shown("saw:", "\n#__#\n#P_#\n")
    'saw:\n#__#\n#P_#'
    """
    text = observation.strip()
    if "\n" not in text:
        return f"{lead} {text}"
    rows = observation.rstrip().splitlines()
    while rows and not rows[0].strip():
        rows.pop(0)
    return lead + "\n" + "\n".join(rows)


def info_goal(info: Mapping[str, Any]) -> str:
    """The task sentence an environment's ``info`` carries (``info["task"]["goal"]``; ``""``).

    >>> info_goal({"task": {"goal": "put a mug in the sink"}}), info_goal({})
    ('put a mug in the sink', '')
    """
    return str((info.get("task") or {}).get("goal", ""))


def info_actions(info: Mapping[str, Any]) -> list[str]:
    """The admissible actions an environment's ``info`` lists, as strings (``[]``: none).

    >>> info_actions({"admissible_actions": ["look", 3]}), info_actions({"admissible_actions": None})
    (['look', '3'], [])
    """
    return [str(a) for a in info.get("admissible_actions") or []]


def format_action(action: str) -> str:
    """The response text that names ``action`` (what ``choose`` mode scores and trains on)."""
    return f"<action>{action}</action>"


def parse_action(response: str, admissible: Sequence[str] | None = None) -> tuple[str, bool]:
    """Extract the action from a response.

    Returns:
        ``(action, ok)``: ``ok`` is False when there is no complete ``<action>`` block (the
        whole stripped response is then returned as the attempted action) or when the action
        is not admissible.  Matching against ``admissible`` ignores case and surrounding
        whitespace and returns the canonical spelling.  The last block wins when there are
        several.
    """
    found = _ACTION_RE.findall(response)
    if not found:
        return response.strip()[:500], False
    action = " ".join(found[-1].split())
    if admissible is None:
        return action, bool(action)
    canon = {" ".join(a.split()).lower(): a for a in admissible}
    hit = canon.get(action.lower())
    if hit is None:
        return action, False
    return hit, True


def reply_action(response: str, admissible: Sequence[str] | None = None) -> str:
    """The action a reply sends to the environment: the last ``<action>`` block (canonical
    spelling when admissible; an inadmissible one as written, for the environment to reject),
    or :data:`NO_ACTION` when there is no non-empty block."""
    action, _ok = parse_action(response, admissible or None)
    if "<action>" not in response.lower() or not action:
        return NO_ACTION
    return action
