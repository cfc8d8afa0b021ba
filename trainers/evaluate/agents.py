"""The agents ``rubricgym eval`` can evaluate, built from a model spec.

Specs:

* ``random`` — a uniformly random admissible action, drawn from a generator seeded by the
  panel hash, the task and the turn (the same on every machine and at any concurrency;
  WebShop's ``search[<your query>]`` placeholder becomes a search for the goal's words);
* ``walkthrough`` — ALFWorld's stored expert plan, WebShop's oracle (played on a private copy
  of the environment at the episode's start): **upper bounds, not models**;
* ``openai:MODEL`` — any OpenAI-compatible chat-completions endpoint (vLLM, SGLang,
  llama.cpp's server, hosted APIs) through the official ``openai`` client: ``base_url``, the
  API key from an environment variable, temperature, max tokens, retries with exponential
  backoff (the client's own, for connection errors, 408/409/429 and 5xx) and a timeout;
  ``action_format="tools"`` sends the actions as function-calling tools
  (:mod:`agent_envs.agent.tools`).  A reply that is no chat completion (not JSON, an HTML
  page, a ``message`` that is null) fails its episode with an :class:`AgentError` naming what
  was wrong; a tool call without a named function is an invalid action whose trace line says
  so (``problem``);
* ``hf:NAME`` — a local transformers model (``trainers.models.load_policy`` names: a
  directory, a hub id in the local cache, ``smollm2``, ``tiny-llama``), greedy at temperature
  0, in float32 or bfloat16, run on a worker thread so the event loop stays free; with
  ``batch_size`` > 1 the requests of concurrent episodes are generated together; with
  ``action_format="tools"`` the tools are described in the system message and the reply's
  ``<tool_call>`` is the action.

Every agent answers :meth:`Agent.decide` with a :class:`Reply`: the raw text (what the trace
records and the environment parses) and, for tool calls, the chosen action.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_envs.agent.prompts import format_action, info_actions, info_goal

__all__ = ["Agent", "AgentError", "Reply", "TurnContext", "make_agent"]

SEARCH_PLACEHOLDER = "search[<your query>]"


class AgentError(RuntimeError):
    """The agent could not answer (an endpoint that failed after its retries, ...)."""


@dataclass(frozen=True)
class TurnContext:
    """One decision: what the agent is shown and where it is."""

    panel_hash: str
    task_index: int
    t: int
    messages: Sequence[Mapping[str, str]]
    info: Mapping[str, Any]
    first_info: Mapping[str, Any]
    tools: Sequence[Mapping[str, Any]] | None = None


@dataclass(frozen=True)
class Reply:
    """The agent's answer: ``text`` (parsed by the environment's ``<action>`` rule),
    ``action`` (set when the agent chose by a tool call; the text then records the call),
    ``usage`` (token counts) and ``problem`` (why a malformed answer counts as an invalid
    action, recorded in the trace)."""

    text: str
    action: str | None = None
    usage: Mapping[str, Any] = field(default_factory=dict)
    problem: str | None = None


class Agent:
    """Base class: ``name``, ``deterministic`` (same replies at any concurrency) and ``decide``."""

    name = "agent"
    deterministic = True
    uses_tools = False

    async def decide(self, ctx: TurnContext) -> Reply:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """What the run folder records about the agent."""
        return {"name": self.name}

    async def aclose(self) -> None:
        """Release the agent's resources."""


def _seeded(ctx: TurnContext) -> random.Random:
    key = f"{ctx.panel_hash}:{ctx.task_index}:{ctx.t}".encode()
    return random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))


class RandomAgent(Agent):
    """A seeded uniformly random admissible action (a lower bound)."""

    name = "random"

    async def decide(self, ctx: TurnContext) -> Reply:
        actions = info_actions(ctx.info) or ["look"]
        action = _seeded(ctx).choice(actions)
        if action == SEARCH_PLACEHOLDER:
            goal = info_goal(ctx.info)
            action = f"search[{' '.join(goal.split()[:8])}]"
        return Reply(format_action(action))


class WalkthroughAgent(Agent):
    """The environment family's expert (:class:`agent_envs.family.Family`): its plan from the
    episode's first ``info`` (ALFWorld's stored walkthrough), or its oracle replayed on a
    private environment (WebShop's).

    An upper bound on what the panel allows, not a model.
    """

    name = "walkthrough"

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any], reset_options: Mapping[str, Any]) -> None:
        self.env_id, self.env_kwargs, self.reset_options = env_id, dict(env_kwargs), dict(reset_options)
        self._plans: dict[int, list[str]] = {}
        self._lock = threading.Lock()
        self._mirror: Any = None

    def _plan(self, ctx: TurnContext) -> list[str]:
        if ctx.task_index not in self._plans:
            from agent_envs.family import family_of

            fam = family_of(self.env_id)
            if fam is None or not (fam.expert or fam.oracle):
                raise ValueError(f"{self.env_id!r} declares no expert (agent_envs.family.Family.expert/oracle)")
            plan = fam.expert_plan(ctx.first_info) if fam.expert else self._oracle_plan(ctx, fam.oracle)
            self._plans[ctx.task_index] = plan
        return self._plans[ctx.task_index]

    def _oracle_plan(self, ctx: TurnContext, oracle: str) -> list[str]:
        from agent_envs import make_env
        from agent_envs.family import load_entry

        oracle_action = load_entry(oracle)
        with self._lock:
            if self._mirror is None:
                self._mirror = make_env(self.env_id, self.env_kwargs)
            env = self._mirror
            task = (ctx.first_info.get("task") or {}).get("index", ctx.task_index)
            env.reset(seed=0, options={**self.reset_options, "task": task})
            plan: list[str] = []
            done = False
            while not done and len(plan) < 50:
                plan.append(oracle_action(env.unwrapped))
                _obs, _r, term, trunc, _info = env.step(plan[-1])
                done = term or trunc
            return plan

    async def decide(self, ctx: TurnContext) -> Reply:
        plan = await asyncio.to_thread(self._plan, ctx) if ctx.task_index not in self._plans else self._plans[ctx.task_index]
        return Reply(format_action(plan[ctx.t] if ctx.t < len(plan) else "look"))

    async def aclose(self) -> None:
        if self._mirror is not None:
            self._mirror.close()


class OpenAIAgent(Agent):
    """A chat-completions endpoint through the official ``openai`` client.

    Args:
        model: The model name the endpoint serves.
        base_url: The endpoint (``None``: the client's default, ``OPENAI_BASE_URL`` or api.openai.com).
        api_key_env: Environment variable holding the API key (local servers take any value).
        temperature, max_tokens: Sampling.
        retries: Retries of a failed request (the client backs off exponentially).
        timeout: Seconds per request.
        action_format: ``"text"`` (``<action>`` blocks) or ``"tools"`` (function calls).
        tool_choice: With tools: ``"auto"``, ``"required"`` (OpenAI, vLLM) or ``"first"`` (the
            first tool offered, by name: a call the server must make, which llama.cpp's
            grammar-constrained function calling supports where ``"required"`` is not).
    """

    name = "openai"

    def __init__(self, model: str, *, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 temperature: float = 0.0, max_tokens: int = 256, retries: int = 4, timeout: float = 60.0,
                 action_format: str = "text", tool_choice: str = "auto") -> None:
        try:
            import openai
        except ImportError as exc:
            raise ImportError("openai:MODEL needs the openai client: pip install 'rubricgym[eval]'") from exc
        self.model, self.base_url, self.api_key_env = model, base_url, api_key_env
        self.temperature, self.max_tokens, self.retries, self.timeout = temperature, max_tokens, retries, timeout
        self.uses_tools = action_format == "tools"
        if tool_choice not in ("auto", "required", "first"):
            raise ValueError(f"tool_choice must be auto, required or first, got {tool_choice!r}")
        self.tool_choice = tool_choice
        self.deterministic = temperature == 0.0
        self._openai = openai
        self._client = openai.AsyncOpenAI(base_url=base_url, api_key=os.environ.get(api_key_env) or "EMPTY",
                                          max_retries=retries, timeout=timeout)

    def describe(self) -> dict[str, Any]:
        return {"name": f"openai:{self.model}", "base_url": self.base_url or "(client default)",
                "temperature": self.temperature, "max_tokens": self.max_tokens, "retries": self.retries,
                "action_format": "tools" if self.uses_tools else "text", "tool_choice": self.tool_choice}

    async def decide(self, ctx: TurnContext) -> Reply:
        kwargs: dict[str, Any] = {"model": self.model, "messages": list(ctx.messages),
                                  "temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.uses_tools and ctx.tools:
            kwargs["tools"] = list(ctx.tools)
            kwargs["tool_choice"] = ({"type": "function", "function": {"name": ctx.tools[0]["function"]["name"]}}
                                     if self.tool_choice == "first" else self.tool_choice)
        try:
            raw = await self._client.chat.completions.with_raw_response.create(**kwargs)
        except self._openai.APIError as exc:
            raise AgentError(_clip(f"{self._where()}: {type(exc).__name__}: {exc}", ERROR_CHARS)) from exc
        message, usage = _completion_message(raw, self._where())
        if message is None:
            return Reply("", usage=usage, problem="the reply has no choices")
        calls = message.get("tool_calls")
        if self.uses_tools and calls:
            return _tool_reply(calls[0] if isinstance(calls, list) else calls, ctx, usage)
        return Reply(_content_text(message.get("content")), usage=usage)

    def _where(self) -> str:
        return self.base_url or "the endpoint"

    async def aclose(self) -> None:
        await self._client.close()


class LocalAgent(Agent):
    """A local transformers model (greedy at temperature 0), on a worker thread.

    Args:
        name: A :func:`trainers.models.load_policy` name.
        temperature, max_tokens: Sampling.
        seed: The tiny models' initialisation.
        dtype: The weights' precision (``"float32"``, ``"bfloat16"``; bf16 runs on AMX where the
            CPU has it).
        batch_size: Requests answered by one ``generate`` call at most (left-padded).  A batch
            starts when a request is waiting and the model is free, and takes what arrives within
            ``batch_wait`` seconds, up to ``batch_size``: with ``concurrency >= batch_size`` the
            model answers several episodes for about the price of one decode.  With 1, every request
            is generated alone and its reply depends on its prompt only; with more, which prompts
            share a batch depends on timing, and a reply can differ in the last bits of its
            logits (another matrix shape), so greedy replies are not guaranteed to repeat bit for
            bit across runs.
        batch_wait: Seconds a batch waits for more requests (the episodes just answered are
            stepping their environments); unused with ``batch_size`` 1.
        action_format: ``"text"`` (``<action>`` blocks) or ``"tools"``: the tools' JSON schemas
            go into the system message (:func:`with_tool_prompt`) and the reply's first
            ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` (the Hermes/Qwen format; a
            bare JSON object with a ``name`` too) is the action (:func:`parse_tool_call`); a
            reply without one is an invalid action, its trace line saying so.
    """

    name = "hf"

    def __init__(self, name: str, *, temperature: float = 0.0, max_tokens: int = 64, seed: int = 0,
                 dtype: str = "float32", batch_size: int = 1, batch_wait: float = 0.05,
                 action_format: str = "text") -> None:
        from trainers.generation import TransformersBackend
        from trainers.models import load_policy

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model_name, self.temperature, self.max_tokens, self.seed = name, temperature, max_tokens, seed
        self.batch_size, self.batch_wait = batch_size, batch_wait
        self.model, self.tok = load_policy(name, seed=seed, dtype=dtype)
        self.model.eval()
        self._backend = TransformersBackend(self.model, self.tok, batch_size=batch_size)
        self._lock = threading.Lock()
        self._queue: list[tuple[Sequence[Mapping[str, str]], asyncio.Future[tuple[str, dict[str, int]]]]] = []
        self._drainer: asyncio.Task[None] | None = None
        self._arrived: asyncio.Event | None = None
        self.deterministic = temperature == 0.0 and batch_size == 1
        self.uses_tools = action_format == "tools"

    def describe(self) -> dict[str, Any]:
        """The spec, sampling and what the replies depend on beyond the weights: the weights'
        precision, torch's CPU threads (greedy replies can differ between the two paths) and the
        batch size."""
        import torch

        out = {"name": f"hf:{self.model_name}", "temperature": self.temperature, "max_tokens": self.max_tokens,
               "dtype": str(next(self.model.parameters()).dtype).removeprefix("torch."),
               "torch_threads": torch.get_num_threads()}
        if self.batch_size > 1:
            out["batch_size"] = self.batch_size
        if self.uses_tools:
            out["action_format"] = "tools"
        return out

    def _generate(self, batch: Sequence[Sequence[Mapping[str, str]]]) -> list[tuple[str, dict[str, int]]]:
        """The replies to a batch of conversations and their token counts, in order (one
        ``generate`` call of the trainer's backend)."""
        from trainers.lm_policy import chat_ids

        prompts = [chat_ids(self.tok, m) for m in batch]
        with self._lock:
            responses = self._backend.generate(prompts, temperature=self.temperature, top_p=1.0,
                                               max_new_tokens=self.max_tokens)
        return [(self.tok.decode(r, skip_special_tokens=True), {"prompt_tokens": len(p), "completion_tokens": len(r)})
                for p, r in zip(prompts, responses)]

    async def decide(self, ctx: TurnContext) -> Reply:
        future: asyncio.Future[tuple[str, dict[str, int]]] = asyncio.get_running_loop().create_future()
        tools = self.uses_tools and bool(ctx.tools)
        self._queue.append((with_tool_prompt(ctx.messages, ctx.tools) if tools else ctx.messages, future))
        if self._drainer is None or self._drainer.done():
            self._arrived = asyncio.Event()  # on the running loop
            self._drainer = asyncio.create_task(self._drain())
        else:
            self._arrived.set()
        text, usage = await future
        if not tools:
            return Reply(text, usage=usage)
        return _parsed_tool_reply(text, ctx, usage)

    async def _gather(self) -> None:
        """Wait until a batch is full or ``batch_wait`` seconds have passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.batch_wait
        while len(self._queue) < self.batch_size and (left := deadline - loop.time()) > 0:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except asyncio.TimeoutError:  # TimeoutError itself from Python 3.11
                return

    async def _drain(self) -> None:
        """Answer the queue a batch at a time until it is empty."""
        while self._queue:
            await self._gather()
            batch, self._queue = self._queue[:self.batch_size], self._queue[self.batch_size:]
            batch = [(m, f) for m, f in batch if not f.cancelled()]
            if not batch:
                continue
            try:
                replies = await asyncio.to_thread(self._generate, [m for m, _ in batch])
            except Exception as exc:  # noqa: BLE001 - every waiting episode sees the model's error
                for _, f in batch:
                    if not f.done():
                        f.set_exception(exc)
                continue
            for (_, f), reply in zip(batch, replies):
                if not f.done():
                    f.set_result(reply)


#: Characters of an endpoint's reply quoted in an error at most.
ERROR_CHARS = 2000


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}[... {len(text)} characters in all]"


def _completion_message(raw: Any, where: str) -> tuple[Mapping[str, Any] | None, dict[str, Any]]:
    """The first choice's message of a raw chat-completions response and its token counts
    (``None``: no choices).

    Raises:
        AgentError: the body is not JSON (an HTML page, a truncated body), not a chat completion,
            or its first choice has no message object.
    """
    kind = raw.headers.get("content-type", "no content type").split(";")[0].strip()
    try:
        data = json.loads(raw.content)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        hint = " (a web page: does --base-url name the API root, e.g. http://host:8000/v1?)" if "html" in kind else ""
        body = raw.content[:200].decode("utf-8", "replace")
        raise AgentError(f"{where}: the reply (HTTP {raw.status_code}, {kind}) is not JSON{hint}: {exc}; "
                         f"it begins {body!r}") from None
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        what = (f"a JSON {type(data).__name__}" if not isinstance(data, dict) else
                f"keys {sorted(data)[:10]}" + (f", error {json.dumps(data['error'])}" if "error" in data else ""))
        raise AgentError(_clip(f"{where}: the reply is not a chat completion (no choices list; {what})", ERROR_CHARS))
    usage = _usage(data.get("usage"))
    if not data["choices"]:
        return None, usage
    choice = data["choices"][0]
    if not isinstance(choice, dict):
        raise AgentError(f"{where}: the reply's choices[0] is {_json_kind(choice)}, not a choice object")
    message = choice.get("message")
    if not isinstance(message, dict):
        raise AgentError(f"{where}: the reply's choices[0].message is {_json_kind(message)}, not a message object")
    return message, usage


def _json_kind(value: Any) -> str:
    return "null" if value is None else f"a JSON {type(value).__name__}"


def _usage(usage: Any) -> dict[str, Any]:
    """An endpoint's token counts: the numbers (and dicts of numbers) of its ``usage``."""
    if not isinstance(usage, dict):
        return {}
    out: dict[str, Any] = {}
    for key, value in usage.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[str(key)] = value
        elif isinstance(value, dict):
            out[str(key)] = {str(k): v for k, v in value.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return out


def _content_text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _tool_reply(call: Any, ctx: TurnContext, usage: dict[str, Any]) -> Reply:
    """The reply of a tool call; a call without a named function is an invalid action."""
    from agent_envs.agent.prompts import NO_ACTION
    from agent_envs.agent.tools import call_to_action

    function = call.get("function") if isinstance(call, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        problem = ("the tool call has no function" if not isinstance(function, dict)
                   else "the tool call's function has no name")
        text = _clip(json.dumps({"tool_call": call}, default=str), ERROR_CHARS)
        return Reply(text, action=NO_ACTION, usage=usage, problem=problem)
    arguments = function.get("arguments")
    if not isinstance(arguments, (str, dict)) and arguments is not None:
        arguments = json.dumps(arguments)
    action = call_to_action(name, arguments, ctx.info)
    return Reply(json.dumps({"tool_call": {"name": name, "arguments": arguments}}), action=action, usage=usage)


#: How a local model is told about its tools (after the tool instruction of the system message).
TOOL_PROMPT = ("Answer with one call, written as <tool_call>{{\"name\": <tool name>, \"arguments\": <arguments "
               "object>}}</tool_call>. The tools:\n<tools>\n{tools}\n</tools>")

_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def with_tool_prompt(messages: Sequence[Mapping[str, str]], tools: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """``messages`` with the tools' JSON schemas (:data:`TOOL_PROMPT`) added to the system
    message (a new one first when there is none): how a local model is offered tools, in any
    chat template."""
    text = TOOL_PROMPT.format(tools="\n".join(json.dumps(t["function"]) for t in tools))
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system":
        out[0]["content"] = f"{out[0]['content']}\n{text}"
    else:
        out.insert(0, {"role": "system", "content": text})
    return out


def parse_tool_call(text: str) -> tuple[str, Any] | None:
    """``(name, arguments)`` of a reply's first tool call: a ``<tool_call>`` block holding a
    JSON object with a ``name``, or else the reply's first such JSON object (``None``: none).

    >>> parse_tool_call('<tool_call>{"name": "go_to", "arguments": {"target": "desk 1"}}</tool_call>')
    ('go_to', {'target': 'desk 1'})
    >>> parse_tool_call('I will look. {"name": "look", "arguments": {}} done'), parse_tool_call("look")
    (('look', {}), None)
    """
    blocks = [b.strip() for b in _TOOL_CALL.findall(text)]
    starts = [(b, 0) for b in blocks] or [(text, m.start()) for m, _ in zip(re.finditer(r"\{", text), range(20))]
    decoder = json.JSONDecoder()
    for source, start in starts:
        try:
            obj, _end = decoder.raw_decode(source, start)
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("name"), str) and obj["name"]:
            return obj["name"], obj.get("arguments", obj.get("parameters", {}))
    return None


def _parsed_tool_reply(text: str, ctx: TurnContext, usage: dict[str, Any]) -> Reply:
    """A local model's reply as a tool call (an invalid action when it holds none)."""
    from agent_envs.agent.prompts import NO_ACTION
    from agent_envs.agent.tools import call_to_action

    call = parse_tool_call(text)
    if call is None:
        return Reply(text, action=NO_ACTION, usage=usage, problem="no tool call in the reply")
    name, arguments = call
    if not isinstance(arguments, (str, dict)):
        arguments = json.dumps(arguments)
    return Reply(text, action=call_to_action(name, arguments, ctx.info), usage=usage)


def make_agent(spec: str, *, env_id: str, env_kwargs: Mapping[str, Any], reset_options: Mapping[str, Any],
               **options: Any) -> Agent:
    """The agent of a model spec (module doc); ``options``: the OpenAI / local model options.

    Raises:
        ValueError: an unknown spec (the message lists the kinds).
    """
    if spec == "random":
        return RandomAgent()
    if spec == "walkthrough":
        return WalkthroughAgent(env_id, env_kwargs, reset_options)
    kind, _, name = spec.partition(":")
    if kind == "openai" and name:
        keys = ("base_url", "api_key_env", "temperature", "max_tokens", "retries", "timeout", "action_format",
                "tool_choice")
        return OpenAIAgent(name, **{k: v for k, v in options.items() if k in keys and v is not None})
    if kind == "hf" and name:
        keys = ("temperature", "max_tokens", "dtype", "batch_size", "action_format")
        return LocalAgent(name, **{k: v for k, v in options.items() if k in keys and v is not None})
    raise ValueError(f"unknown model spec {spec!r}; use random, walkthrough, openai:MODEL or hf:NAME")
