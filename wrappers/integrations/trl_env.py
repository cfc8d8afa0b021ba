"""TRL's public environment API: rubricgym environments for ``GRPOTrainer(environment_factory=...)``.

TRL 1.16's ``environment_factory`` is a zero-argument callable returning an environment whose
public methods become the model's function-calling tools; ``reset(**example)`` starts an
episode from a dataset row and returns text appended to the prompt, and ``get_reward()``
scores the finished rollout.  :class:`RubricEnvironments` is such a factory for any rubricgym
environment; its instances are :class:`ALFWorldTools` or :class:`WebShopTools`, one tool per
action kind (``go_to(target)``, ``take(object, receptacle)``, ..., ``search(query)``,
``click(button)``: the kinds, templates and wording of :mod:`agent_envs.agent.tools`, which
``rubricgym eval --action-format tools`` uses too).  Each call plays one environment step; the
tool message is the next observation and the admissible actions.  A call whose arguments name
no admissible action is stepped like any other invalid action (the environment's penalty);
after the episode ends a call steps nothing and says so.  ``get_reward`` is the episode's
summed environment reward (task reward + penalties); TRL computes GRPO's advantages from it.

What this does not give: step-level credit.  TRL's loss takes one advantage per completion
here, so GiGPO, GraphGPO, MileGPO, SCPO and MCGPO need
:mod:`wrappers.integrations.trl_grpo` (``rollout_func`` plus per-token advantages, on TRL's
private loss, pinned to TRL 1.16).  The scored episodes are kept as
:class:`~rubrics.trajectory.Trajectory` objects (:meth:`RubricEnvironments.pop_trajectories`)
for logging or offline credit.

Imports no TRL, torch or engine: the contract is duck-typed (TRL reads the class's methods).

Example:
    >>> import tempfile
    >>> from agent_envs.webshop.testing import write_mini_catalogue
    >>> cat = str(write_mini_catalogue(tempfile.mkdtemp()))
    >>> factory = RubricEnvironments("WebShop-Rubric-v0", {"catalogue": cat, "verify": False, "tagger": "lexicon"})
    >>> env = factory()
    >>> "Possible actions: search[<your query>]" in env.reset(task=0)
    True
    >>> env.search(query="trail running shoes").splitlines()[-1].startswith("Possible actions: click[")
    True
    >>> env.get_reward(), [len(t.steps) for t in factory.pop_trajectories()]
    (0.0, [1])
    >>> factory.close()
"""

from __future__ import annotations

import inspect
import json
import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agent_envs.agent.prompts import build_prompt, info_actions
from agent_envs.agent.tools import TOOL_INSTRUCTION, call_to_action, kinds_of, tool_result
from agent_envs.family import family_of
from rubrics.trajectory import Trajectory
from wrappers.integrations.episode import TextEpisode, split_tasks

__all__ = ["ALFWorldTools", "RubricEnvironments", "RubricToolEnv", "WebShopTools", "tool_class", "tool_task_dataset"]

#: A ``{slot}`` of an action template.
_SLOTS = re.compile(r"\{(\w+)\}")

#: The tool message of a call made after the episode ended.
OVER = "The episode is over. Do not call any more tools."

#: The dataset fields :meth:`RubricToolEnv.reset` reads (TRL passes every field of the row).
TASK_FIELDS = ("task", "seed", "split")


def _call_parser(response: str, info: Mapping[str, Any]) -> str:
    """A recorded tool call (``{"name", "arguments"}`` JSON) as the action it names."""
    call = json.loads(response)
    return call_to_action(call["name"], call["arguments"], info)


class RubricToolEnv:
    """One rubricgym environment played through tool calls (the tools are the subclass's
    public methods; the base class has none besides TRL's ``reset`` and ``get_reward``).

    Args:
        factory: The :class:`RubricEnvironments` that made it (it keeps the scored episodes).
    """

    def __init__(self, factory: RubricEnvironments) -> None:
        self._factory = factory
        self._episode = TextEpisode(factory.env, factory.env_kwargs, max_steps=factory.max_steps, parser=_call_parser)
        self._return, self._started = 0.0, False

    def reset(self, **example: Any) -> str:
        """Start the episode a dataset row names (its ``task``, ``seed``, ``split`` fields; the
        rest, such as ``prompt``, is ignored); returns the goal, the first observation, the
        admissible actions and the tool instruction, which TRL appends to the prompt."""
        spec = {k: example.get(k) for k in TASK_FIELDS}
        ep = self._episode
        ep.reset(task=spec["task"], seed=None if spec["seed"] is None else int(spec["seed"]), split=spec["split"])
        self._return, self._started = 0.0, True
        adm = info_actions(ep.info)
        return "\n" + build_prompt(ep.goal, ep.obs, adm, [], style="action_only", step=0, instruction=TOOL_INSTRUCTION)

    def get_reward(self) -> float:
        """The episode's summed environment reward; ends the episode (an unfinished one counts
        as truncated) and hands its trajectory to the factory."""
        if self._started:
            self._episode.stop()
            self._factory._scored(self._episode.trajectory())
            self._started = False
        return self._return

    def _act(self, name: str, **arguments: Any) -> str:
        """Step the action a tool call names; the tool message."""
        ep = self._episode
        if ep.done:
            return OVER
        r = ep.step(json.dumps({"name": name, "arguments": arguments}))
        self._return += r.reward
        adm = info_actions(r.info)
        return tool_result(ep.obs, adm, done=r.done, won=ep.success)

    def _close(self) -> None:
        self._episode.close()


class ALFWorldTools(RubricToolEnv):
    """ALFWorld's actions as tools (:data:`agent_envs.agent.tools.ACTION_KINDS`)."""

    def go_to(self, target: str) -> str:
        """Walk to a receptacle or place.

        Args:
            target: The receptacle or place, as written in the possible actions (e.g. "desk 1").
        """
        return self._act("go_to", target=target)

    def take(self, object: str, receptacle: str) -> str:
        """Pick up an object from a receptacle.

        Args:
            object: The object (e.g. "mug 1").
            receptacle: Where it is (e.g. "desk 1").
        """
        return self._act("take", object=object, receptacle=receptacle)

    def move(self, object: str, receptacle: str) -> str:
        """Put the object you hold into or onto a receptacle.

        Args:
            object: The object you hold.
            receptacle: Where to put it.
        """
        return self._act("move", object=object, receptacle=receptacle)

    def open(self, target: str) -> str:
        """Open a receptacle.

        Args:
            target: The receptacle (e.g. "fridge 1").
        """
        return self._act("open", target=target)

    def close(self, target: str) -> str:
        """Close a receptacle.

        Args:
            target: The receptacle.
        """
        return self._act("close", target=target)

    def toggle(self, target: str) -> str:
        """Switch an object or appliance on or off.

        Args:
            target: The object or appliance.
        """
        return self._act("toggle", target=target)

    def use(self, target: str) -> str:
        """Use an object (e.g. a lamp).

        Args:
            target: The object.
        """
        return self._act("use", target=target)

    def clean(self, object: str, receptacle: str) -> str:
        """Clean an object with a receptacle (a sink).

        Args:
            object: The object you hold.
            receptacle: The sink.
        """
        return self._act("clean", object=object, receptacle=receptacle)

    def heat(self, object: str, receptacle: str) -> str:
        """Heat an object with a receptacle (a microwave).

        Args:
            object: The object you hold.
            receptacle: The microwave.
        """
        return self._act("heat", object=object, receptacle=receptacle)

    def cool(self, object: str, receptacle: str) -> str:
        """Cool an object with a receptacle (a fridge).

        Args:
            object: The object you hold.
            receptacle: The fridge.
        """
        return self._act("cool", object=object, receptacle=receptacle)

    def examine(self, target: str) -> str:
        """Look closely at an object or receptacle.

        Args:
            target: The object or receptacle.
        """
        return self._act("examine", target=target)

    def look(self) -> str:
        """Look around."""
        return self._act("look")

    def inventory(self) -> str:
        """List what you hold."""
        return self._act("inventory")


class WebShopTools(RubricToolEnv):
    """WebShop's actions as tools (:data:`agent_envs.agent.tools.ACTION_KINDS`)."""

    def search(self, query: str) -> str:
        """Search the shop for products.

        Args:
            query: The search words.
        """
        return self._act("search", query=query)

    def click(self, button: str) -> str:
        """Click a button or link on the page.

        Args:
            button: The button or link, as written in the possible actions (e.g. "buy now").
        """
        return self._act("click", button=button)


class RubricEnvironments:
    """``environment_factory`` for TRL's ``GRPOTrainer``: each call makes one tool environment.

    Args:
        env: A rubricgym Gymnasium id (or a zero-argument factory; then pass ``tools``).
        env_kwargs: Keyword arguments for ``gym.make``.
        max_steps: Cap on tool calls that step the environment per episode (``None``: the
            environment's own horizon).
        tools: The tool class (default: :func:`tool_class` of ``env``).
        keep: How many scored episodes :meth:`pop_trajectories` can return at most (the oldest
            are dropped past it, so a run that never pops them stays bounded in memory).
    """

    def __init__(self, env: Any, env_kwargs: Mapping[str, Any] | None = None, *, max_steps: int | None = None,
                 tools: type[RubricToolEnv] | None = None, keep: int = 4096) -> None:
        self.env, self.env_kwargs, self.max_steps = env, dict(env_kwargs or {}), max_steps
        if tools is None:
            if not isinstance(env, str):
                raise ValueError("an environment factory needs tools= (e.g. tool_class(ENV_ID), ALFWorldTools)")
            tools = tool_class(env)
        self.tools = tools
        self._instances: list[RubricToolEnv] = []
        self._done: deque[Trajectory] = deque(maxlen=keep)
        self._lock = threading.Lock()

    def __call__(self) -> RubricToolEnv:
        instance = self.tools(self)
        with self._lock:
            self._instances.append(instance)
        return instance

    def _scored(self, trajectory: Trajectory) -> None:
        with self._lock:
            self._done.append(trajectory)

    def pop_trajectories(self) -> list[Trajectory]:
        """The episodes scored (``get_reward``) since the last call, in scoring order (at most
        ``keep``, the most recent)."""
        with self._lock:
            out = list(self._done)
            self._done.clear()
        return out

    def tasks(self, n: int | None = None, split: str | None = None) -> list[Any]:
        """The first ``n`` tasks (default: all) of the environment's split, in ``rubricgym
        train``'s order, for :func:`tool_task_dataset`: rows never name a task the split lacks
        (:func:`~wrappers.integrations.episode.split_tasks`; a ValueError when it has fewer)."""
        return split_tasks(self.env, self.env_kwargs, n, split)

    def close(self) -> None:
        """Close every environment made."""
        with self._lock:
            instances, self._instances = self._instances, []
        for instance in instances:
            instance._close()


def _public(cls: type) -> list[str]:
    return sorted(n for n in vars(cls) if not n.startswith("_"))


def _tool_method(name: str, slots: list[str], doc: str) -> Callable[..., str]:
    """A tool method ``name(self, <slots>: str) -> str`` that steps the action it names."""
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(s, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str) for s in slots]
    signature = inspect.Signature(params, return_annotation=str)

    def method(self: RubricToolEnv, *args: Any, **kwargs: Any) -> str:
        bound = signature.bind(self, *args, **kwargs)
        return self._act(name, **{s: bound.arguments[s] for s in slots})

    method.__name__ = method.__qualname__ = name
    method.__signature__ = signature  # type: ignore[attr-defined]
    method.__annotations__ = {**{s: str for s in slots}, "return": str}
    args = "".join(f"\n    {s}: The {s}, as written in the possible actions." for s in slots)
    method.__doc__ = doc + (f"\n\nArgs:{args}" if slots else "")
    return method


def tool_class(env_id: str) -> type[RubricToolEnv]:
    """The tool class of a registered environment: :class:`ALFWorldTools` or :class:`WebShopTools`
    when their methods are the family's tool kinds, else one generated from the kinds
    (:attr:`agent_envs.family.Family.tool_kinds`: a method per kind, its slots as ``str``
    arguments, its description as the docstring).

    >>> tool_class("WebShop-Rubric-v0") is WebShopTools
    True

    Raises:
        ValueError: ``env_id`` belongs to no registered family.
    """
    kinds = sorted(kinds_of(env_id))
    for cls in (ALFWorldTools, WebShopTools):
        if _public(cls) == kinds:
            return cls
    fam = family_of(env_id)
    assert fam is not None  # kinds_of raised otherwise
    methods = {name: _tool_method(name, _SLOTS.findall(template), doc) for name, template, doc in fam.tool_kinds}
    cls_name = "".join(w.capitalize() for w in fam.name.split("_")) + "Tools"
    return type(cls_name, (RubricToolEnv,), {"__doc__": f"{fam.name}'s actions as tools.", **methods})


def tool_task_dataset(tasks: Iterable[Any], seed: int | None = None, split: str | None = None,
                      system: str | None = None) -> Any:
    """A ``datasets.Dataset`` for ``environment_factory`` training: per task a conversational
    ``prompt`` (the task itself is appended by :meth:`RubricToolEnv.reset`) and the ``task``,
    ``seed`` and ``split`` fields reset reads."""
    from datasets import Dataset

    tasks = list(tasks)
    head = [{"role": "system", "content": system}] if system else []
    intro = "You control an agent in a text-based environment. Your task follows."
    return Dataset.from_list([{"prompt": [*head, {"role": "user", "content": intro}], "task": t, "seed": seed,
                               "split": split} for t in tasks])
