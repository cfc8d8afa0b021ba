"""The typed messages of a rubricgym OpenEnv server: action, observation and state.

They are OpenEnv's own pydantic base types (``openenv.core.env_server.types``), extended:

* :class:`RubricAction` — the action as text (``{"text": "go to desk 1"}``), or as a tool call
  of :mod:`agent_envs.agent.tools` (``{"tool": "go_to", "arguments": {"target": "desk 1"}}``),
  which the server turns into the same text with :func:`~agent_envs.agent.tools.call_to_action`.
  Text the environment does not admit is an invalid step (its penalty, ``info["valid"]`` false),
  not an error; a message that is neither (no text and no tool, both, a number) is refused by
  validation with the reason, and the session goes on.
* :class:`RubricObservation` — the observation text, ``terminated``/``truncated`` (``done`` is
  their *or*), the reward, and in ``metadata`` the step's whole ``info`` dict (SPEC §2: the
  rubric channels, the matching keys, the admissible actions, the task, ``won``, ``score``,
  ``valid``, ...).  JSON has no tuples or sets, so the keys' tuples and frozensets travel as the
  tagged objects of :mod:`rubrics.trajectory`'s JSON Lines (``{"$tuple": [...]}``,
  ``{"$frozenset": [...]}``); :func:`info_from_metadata` gives back equal values.  Plain fields
  (``won``, ``score``, ``admissible_actions``, ``rubric``) are plain JSON for any client.
* :class:`RubricState` — the session's episode: id, steps, environment id, task, ``won``,
  ``score`` and whether it is over.

Example:
    >>> action = RubricAction(tool="take", arguments={"object": "mug 1", "receptacle": "desk 1"})
    >>> action.as_text()
    'take mug 1 from desk 1'
    >>> RubricAction(text="look").as_text()
    'look'
    >>> info = {"keys": {"exact": ("desk 1", frozenset({"mug"}))}, "won": False}
    >>> metadata = info_to_metadata(info)
    >>> metadata["keys"]["exact"]
    {'$tuple': ['desk 1', {'$frozenset': ['mug']}]}
    >>> info_from_metadata(metadata) == info
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from agent_envs.agent.tools import call_to_action
from rubrics.trajectory import _decode, _encode  # the JSON Lines codec of keys and signatures

__all__ = ["RubricAction", "RubricObservation", "RubricState", "info_from_metadata", "info_to_metadata"]

#: Longest action text a server accepts (characters); longer text is refused by validation.
MAX_ACTION_CHARS = 100_000


class RubricAction(Action):
    """One action: ``text``, or a tool call (``tool`` and its ``arguments``)."""

    text: str | None = Field(default=None, max_length=MAX_ACTION_CHARS,
                             description="The action as text, e.g. 'go to desk 1' or 'search[red shoes]'.")
    tool: str | None = Field(default=None, max_length=64,
                             description="Or a tool call's name (agent_envs.agent.tools), e.g. 'go_to'.")
    arguments: dict[str, Any] | str | None = Field(
        default=None, description="The tool call's arguments (an object, or its JSON text).")

    @model_validator(mode="after")
    def _one_form(self) -> RubricAction:
        # PydanticCustomError, not ValueError: OpenEnv's server sends the validation errors as JSON,
        # and a ValueError's error entry would carry the exception object (not serialisable)
        if (self.text is None) == (self.tool is None):
            raise PydanticCustomError("action_form", "give the action as text or as a tool call (tool and "
                                      "arguments), not both or neither")
        if self.text is None and isinstance(self.arguments, str) and len(self.arguments) > MAX_ACTION_CHARS:
            raise PydanticCustomError("action_length", "tool arguments longer than {limit} characters",
                                      {"limit": MAX_ACTION_CHARS})
        return self

    def as_text(self) -> str:
        """The action string the environment steps."""
        return self.text if self.text is not None else call_to_action(self.tool, self.arguments)


class RubricObservation(Observation):
    """What a reset or step returns; ``metadata`` is the step's ``info`` (tagged JSON)."""

    text: str = Field(default="", description="The observation text.")
    terminated: bool = Field(default=False, description="The episode ended (won, lost or the task's end).")
    truncated: bool = Field(default=False, description="The episode was cut at the horizon.")


class RubricState(State):
    """The session's current episode."""

    env_id: str = Field(default="", description="The rubricgym environment id served.")
    task: dict[str, Any] = Field(default_factory=dict, description="info['task'] of the episode (tagged JSON).")
    won: bool = Field(default=False, description="Whether the episode has been won.")
    score: float = Field(default=0.0, description="The episode's score so far (info['score']).")
    done: bool = Field(default=False, description="Whether the episode is over.")


def info_to_metadata(info: Mapping[str, Any]) -> dict[str, Any]:
    """An ``info`` dict as JSON-ready metadata (tuples, sets and non-string keys tagged).

    Raises:
        TypeError: a value JSON cannot carry (the message names the field).
    """
    out = {}
    for name, value in info.items():
        try:
            out[str(name)] = _encode(value)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"info[{name!r}] cannot be sent as JSON: {exc}") from exc
    return out


def info_from_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``info`` dict a server sent (:func:`info_to_metadata`'s inverse)."""
    return _decode(dict(metadata or {}))
