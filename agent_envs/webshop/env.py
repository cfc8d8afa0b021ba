"""``WebShop-Rubric-v0``: the WebShop text environment with rubric channels (SPEC §2).

Embedded by default: the engine runs in-process on a catalogue shared by every environment
in the process (the generated catalogue, or upstream's files when given).  The page state
machine lives in :class:`~agent_envs.webshop.session.ShopSession`; this class turns its
:class:`~agent_envs.webshop.session.PageSnapshot` s into Gymnasium steps, rewards, rubric
channels and matching keys, so any backend that produces the same snapshots (a server, a
browser) produces the same episodes.

Rewards (10-point scale): 10 for a purchase with raw score >= 0.999, 0 otherwise, -0.1 for an
inadmissible action (``info["valid"] = False``; the page does not change); the raw score is
``info["score"]``.  Horizon 15 actions (``truncated``).

Example:
    >>> import gymnasium as gym, agent_envs
    >>> env = gym.make("WebShop-Rubric-v0", catalogue="generated", num_products=120, tagger="lexicon")
    >>> obs, info = env.reset(options={"task": 0})
    >>> obs.startswith("WebShop [SEP] Instruction:")
    True
    >>> info["admissible_actions"]
    ['search[<your query>]']
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agent_envs.info import rubric_info
from agent_envs.webshop import rubric as rb
from agent_envs.webshop.catalogue import (
    Catalogue,
    CatalogueSpec,
    check_int,
    default_data_dir,
    find_real_files,
    get_catalogue,
)
from agent_envs.webshop.generator import MAX_PRODUCTS
from agent_envs.webshop.goals import SPLITS, Goal
from agent_envs.webshop.scorer import NounTagger, get_tagger
from agent_envs.webshop.session import (
    SEARCH_ACTION,
    ActionOutcome,
    PageSnapshot,
    ShopSession,
    bounded_put,
    shared_page_memo,
)
from rubrics import SignatureTracker, load_template

__all__ = [
    "MAX_ACTION_CHARS",
    "MAX_OBSERVATION_CHARS",
    "Backend",
    "EmbeddedBackend",
    "WebShopRubricEnv",
    "resolve_catalogue_spec",
]

logger = logging.getLogger(__name__)

#: ``"12"`` or ``"webshop/human/12"`` (ASCII digits only: ``int()`` takes other digits too).
_TASK_ID = re.compile(r"(?:webshop/(?P<kind>[a-z]+)/)?(?P<index>[0-9]{1,9})")

MAX_OBSERVATION_CHARS = 1 << 20
MAX_ACTION_CHARS = 4096


#: every admissible action's key per (goal words, page), shared by the environments of a
#: process (a pure function of both: siblings and later episodes of a goal revisit the same
#: pages); emptied past _ACTION_KEY_PAGES entries of about 2 KB (a memory bound)
_PAGE_ACTION_KEYS: dict[tuple, dict[str, str]] = {}
_ACTION_KEY_PAGES = 20_000


def _state_key(snap: Any) -> str:
    """The canonical page state: the page text plus the selected options.

    Selecting an option does not change an item page's text, but it changes the page's state
    (upstream's item URL carries the options, and "buy now" purchases them), so two visits
    of the same item with different options are different states for GiGPO/GraphGPO groups.
    """
    if not snap.options:
        return snap.text
    chosen = " | ".join(f"{k}: {v}" for k, v in sorted(snap.options.items()))
    return f"{snap.text} [selected: {chosen}]"


class Backend(Protocol):
    """What drives the shop for one environment: embedded, HTTP server or browser."""

    def start(self, goal: Goal) -> PageSnapshot:
        """Begin an episode on ``goal``; return the start page."""
        ...

    def act(self, action: str) -> tuple[ActionOutcome, PageSnapshot]:
        """Apply a text action; return its outcome and the resulting page."""
        ...

    def snapshot(self) -> PageSnapshot:
        """The current page."""
        ...

    def close(self) -> None:
        """Release resources."""
        ...


class EmbeddedBackend:
    """In-process engine: a :class:`ShopSession` over the shared catalogue."""

    def __init__(self, catalogue: Catalogue, tagger: NounTagger) -> None:
        self.catalogue = catalogue
        self.tagger = tagger
        self.session: ShopSession | None = None
        self.pages = shared_page_memo(catalogue, tagger)  # pages built by one episode serve the next ones

    def start(self, goal: Goal) -> PageSnapshot:
        """Begin an episode on ``goal``."""
        self.session = ShopSession(self.catalogue, goal, self.tagger, pages=self.pages)
        return self.session.snapshot()

    def act(self, action: str) -> tuple[ActionOutcome, PageSnapshot]:
        """Apply ``action`` to the session."""
        assert self.session is not None, "start() first"
        outcome = self.session.act(action)
        return outcome, self.session.snapshot()

    def snapshot(self) -> PageSnapshot:
        """The current page."""
        assert self.session is not None, "start() first"
        return self.session.snapshot()

    def close(self) -> None:
        """Nothing to release."""
        self.session = None


def resolve_catalogue_spec(catalogue: str | os.PathLike[str], num_products: int, seed: int,
                           price_seed: int, verify: bool, limit: int | None) -> CatalogueSpec:
    """``"auto"`` -> installed upstream files if present (``$RUBRICGYM_WEBSHOP_DATA`` or
    ``~/.cache/rubricgym/webshop``), else the generated catalogue; ``"generated"``; or a
    directory of upstream files."""
    if not isinstance(catalogue, (str, os.PathLike)):
        raise TypeError(f"catalogue must be 'auto', 'generated' or a directory, got {catalogue!r}")
    source = os.fspath(catalogue)
    if source == "auto":
        real = find_real_files(default_data_dir())
        source = str(default_data_dir()) if real is not None else "generated"
    if source != "generated":
        source = str(os.path.abspath(os.path.expanduser(source)))
    return CatalogueSpec(source=source, num_products=check_int("num_products", num_products, 1, MAX_PRODUCTS),
                         seed=check_int("catalogue_seed", seed), price_seed=check_int("price_seed", price_seed),
                         verify=bool(verify), limit=None if limit is None else check_int("limit", limit, 1))


def _finite(name: str, value: Any) -> float:
    """``value`` as a float if it is a finite real number (numpy's too, a bool is not)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r:.60} ({type(value).__name__})")
    return float(value)


class WebShopRubricEnv(gym.Env[str, str]):
    """WebShop text environment with rubric channels, keys and goal-aware action keys.

    Args:
        catalogue: ``"auto"`` (installed upstream files win, else generated), ``"generated"``,
            or a directory with upstream's files (verified by sha256).
        num_products: Size of the generated catalogue, 1 to
            :data:`~agent_envs.webshop.generator.MAX_PRODUCTS` (100 000).
        catalogue_seed: Generator seed.
        price_seed: Seed of range prices and price ceilings.
        verify: Verify real files against their published sha256.
        limit: Use only the first ``limit`` raw products (upstream's ``num_products``), >= 1.
        goal_kind: ``"human"`` (upstream's default) or ``"synthetic"``.
        split: Default split for tasks sampled at reset: ``test``, ``eval``, ``train``, ``all``.
        observation_mode: ``"text"`` or ``"text_rich"``.
        max_steps: Horizon (15).
        invalid_penalty: Penalty for an inadmissible action (-0.1).
        success_reward: Task reward of a purchase with score >= 0.999 (10); both finite numbers.
        tagger: Noun tagger of r_type: ``"auto"`` (spaCy model if installed, else the lexicon
            fallback, flagged), ``"spacy"``, ``"spacy:<model>"``, ``"lexicon"``.
        server_url: Play against a running WebShop server (needs the server module).
        browser: Drive the server through headless Chromium (needs the browser module).
        render_mode: ``"ansi"`` or None.

    Raises:
        ValueError: naming the argument, for a size, seed, limit or horizon that is not an integer
            in range (a bool is not one), or a reward that is not a finite number.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        catalogue: str | os.PathLike[str] = "auto",
        num_products: int = 1000,
        catalogue_seed: int = 0,
        price_seed: int = 0,
        verify: bool = True,
        limit: int | None = None,
        goal_kind: str = "human",
        split: str = "train",
        observation_mode: str = "text",
        max_steps: int = 15,
        invalid_penalty: float = -0.1,
        success_reward: float = 10.0,
        tagger: str = "auto",
        server_url: str | None = None,
        browser: bool = False,
        render_mode: str | None = None,
    ) -> None:
        super().__init__()
        if observation_mode not in ("text", "text_rich"):
            raise ValueError(f"observation_mode must be 'text' or 'text_rich', got {observation_mode!r}")
        if split not in (*SPLITS, "all"):
            raise ValueError(f"split must be one of {', '.join((*SPLITS, 'all'))}, got {split!r}")
        if goal_kind not in ("human", "synthetic"):
            raise ValueError(f"goal_kind must be 'human' or 'synthetic', got {goal_kind!r}")
        max_steps = check_int("max_steps", max_steps, 1)
        invalid_penalty = _finite("invalid_penalty", invalid_penalty)
        success_reward = _finite("success_reward", success_reward)
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.spec_catalogue = resolve_catalogue_spec(catalogue, num_products, catalogue_seed,
                                                     price_seed, verify, limit)
        self.catalogue: Catalogue = get_catalogue(self.spec_catalogue)
        self.tagger: NounTagger = get_tagger(tagger)
        self.goal_kind = goal_kind
        self.split = split
        self.observation_mode = observation_mode
        self.max_steps = max_steps
        self.invalid_penalty = invalid_penalty
        self.success_reward = success_reward
        self.render_mode = render_mode
        self.server_url = server_url
        self.browser = bool(browser)
        self.backend: Backend = self._make_backend()
        charset = self.catalogue.charset()
        self.observation_space = spaces.Text(max_length=MAX_OBSERVATION_CHARS, min_length=0, charset=charset)
        self.action_space = spaces.Text(max_length=MAX_ACTION_CHARS, min_length=1, charset=charset)
        self._template = load_template("webshop", "webshop")
        self._tracker = SignatureTracker(self._template)
        self._goal: Goal | None = None
        self._goal_tokens: frozenset[str] = frozenset()
        self._snap: PageSnapshot | None = None
        self._steps = 0
        self._status: dict[str, Any] = rb.empty_status()
        self._terminated = False

    # ------------------------------------------------------------------ public helpers
    def _make_backend(self) -> Backend:
        if self.server_url is None and not self.browser:
            return EmbeddedBackend(self.catalogue, self.tagger)
        try:
            from agent_envs.webshop.remote import make_remote_backend  # type: ignore[import-not-found]
        except ModuleNotFoundError as exc:
            raise ValueError("server_url=/browser= need agent_envs.webshop.remote, which is not "
                             f"part of this installation ({exc})") from None
        return make_remote_backend(env=self, server_url=self.server_url, browser=self.browser)

    @property
    def goal(self) -> Goal:
        """The current goal, target asin included (for oracles and tests, not agents)."""
        if self._goal is None:
            raise RuntimeError("call reset() first")
        return self._goal

    @property
    def session(self) -> ShopSession | None:
        """The embedded engine's session (None for remote backends)."""
        return getattr(self.backend, "session", None)

    @property
    def page(self) -> PageSnapshot:
        """The current page snapshot."""
        if self._snap is None:
            raise RuntimeError("call reset() first")
        return self._snap

    def goals(self) -> list[Goal]:
        """All goals of this environment's goal kind, in task-index order."""
        return self.catalogue.goal_list(self.goal_kind)

    def split_range(self, split: str | None = None) -> range:
        """Goal indices of ``split`` (default: the environment's split)."""
        split = split or self.split
        n = len(self.goals())
        if split == "all":
            return range(n)
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {', '.join((*SPLITS, 'all'))}")
        lo, hi = self.catalogue.splits(self.goal_kind)[split]
        return range(lo, hi)

    def action_key(self, action: str) -> str:
        """Goal-aware action key of ``action`` on the current (pre-action) page (SPEC §3.4)."""
        return rb.action_key(self.page, self._goal_tokens, action)

    def admissible_actions(self) -> list[str]:
        """Admissible actions on the current page."""
        snap = self.page
        if snap.done:
            return []
        return ([SEARCH_ACTION] if snap.has_search_bar else []) + [f"click[{c}]" for c in snap.clickables]

    # ------------------------------------------------------------------ gym API
    def _resolve_task(self, task: Any, split: str) -> int:
        n = len(self.goals())
        if isinstance(task, str):
            task = self._parse_task_id(task)
        if isinstance(task, (bool, np.bool_)) or not isinstance(task, (int, np.integer)):
            raise TypeError(f"task must be an int goal index or an id like 'webshop/{self.goal_kind}/12', "
                            f"got {type(task).__name__}")
        task = int(task)
        if not 0 <= task < n:
            raise ValueError(f"task {task} out of range: this catalogue has {n} {self.goal_kind} goals")
        if split != "all":
            rng = self.split_range(split)
            if task not in rng:
                raise ValueError(f"task {task} is not in split {split!r} (goals {rng.start}..{rng.stop - 1})")
        return task

    def _parse_task_id(self, task: str) -> int:
        """``"12"`` or ``"webshop/<kind>/12"`` (``info["task"]["id"]``) -> 12; the kind must be
        this environment's goal kind."""
        shown = task if len(task) <= 80 else f"{task[:60]}... ({len(task)} characters)"
        m = _TASK_ID.fullmatch(task.strip())
        if m is None:
            raise ValueError(f"task must be a goal index or an id like 'webshop/{self.goal_kind}/12', "
                             f"got {shown!r}")
        if m["kind"] is not None and m["kind"] != self.goal_kind:
            raise ValueError(f"task {shown!r} names a {m['kind']} goal, but this environment plays "
                             f"{self.goal_kind} goals (make it with goal_kind={m['kind']!r})")
        return int(m["index"])

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode: ``options={"task": goal index or id, "split": ...}``; without a task a
        goal of the split is drawn with the seeded generator.

        ``options["split"]`` applies to that reset only (the environment's ``split`` stays
        the default).  A reset that raises changes nothing (not the RNG, not the episode in
        progress), except when the backend fails to start the new episode: then that episode
        is over and :meth:`step` raises ``RuntimeError`` until a reset succeeds.
        """
        if options is not None and not isinstance(options, Mapping):
            raise TypeError("reset options must be a dict such as {'task': 0, 'split': 'test'}, "
                            f"got {type(options).__name__}")
        options = dict(options or {})
        unknown = set(options) - {"task", "split"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(map(str, unknown))}; expected 'task', 'split'")
        split = options.get("split", self.split if "task" not in options else "all")
        if split not in (*SPLITS, "all"):
            raise ValueError(f"unknown split {split!r}; expected one of {', '.join((*SPLITS, 'all'))}")
        saved_rng = (self._np_random, self._np_random.bit_generator.state if self._np_random else None,
                     self._np_random_seed)
        super().reset(seed=seed)
        try:
            if options.get("task") is not None:
                index = self._resolve_task(options["task"], split)
            else:
                rng = self.split_range(split)
                if len(rng) == 0:
                    raise ValueError(f"split {split!r} has no goals in this catalogue")
                index = int(rng[int(self.np_random.integers(len(rng)))])
            goal = self.goals()[index]
            try:
                snap = self.backend.start(goal)
            except BaseException:
                self._snap = None  # the backend may have left the previous episode
                raise
        except BaseException:
            rng_obj, state, seed_ = saved_rng
            if rng_obj is not None:
                rng_obj.bit_generator.state = state
            self._np_random, self._np_random_seed = rng_obj, seed_
            raise
        self._goal = goal
        self._goal_tokens = rb.goal_tokens(goal.instruction)
        self._snap = snap
        self._steps = 0
        self._terminated = False
        self._tracker.reset()
        self._status = rb.empty_status()
        info = self._info(valid=True, task_reward=0.0, penalty=0.0, feedback="", last_key=None)
        return self._obs(), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Apply a text action (any string; inadmissible ones are penalised, never fatal)."""
        if not isinstance(action, str):
            raise TypeError(f"WebShop actions are strings like 'search[red shoes]' or 'click[buy now]', "
                            f"got {type(action).__name__}")
        if self._snap is None:
            raise RuntimeError("call reset() before step()")
        if self._terminated or self._steps >= self.max_steps:
            raise RuntimeError("the episode has ended (terminated or truncated); call reset()")
        key = self.action_key(action) if len(action) <= MAX_ACTION_CHARS else "invalid"
        if len(action) > MAX_ACTION_CHARS:
            outcome, snap = ActionOutcome(False, feedback=f"action longer than {MAX_ACTION_CHARS} characters"), self._snap
        else:
            outcome, snap = self.backend.act(action)
            self._steps += 1
        self._snap = snap
        penalty = 0.0 if outcome.valid else self.invalid_penalty
        task_reward = 0.0
        if outcome.valid and outcome.done:
            self._terminated = True
            if (outcome.score or 0.0) >= rb.SOLVED_THRESHOLD:
                task_reward = self.success_reward
        self._status = rb.channels(snap)
        self._tracker.update(self._status)
        terminated = self._terminated
        truncated = (not terminated) and self._steps >= self.max_steps
        info = self._info(valid=outcome.valid, task_reward=task_reward, penalty=penalty,
                          feedback=outcome.feedback, last_key=key)
        info["truncated"] = truncated
        return self._obs(), task_reward + penalty, terminated, truncated, info

    def render(self) -> str | None:
        """The current observation (``ansi``)."""
        if self.render_mode == "ansi" and self._snap is not None:
            return self._obs()
        return None

    def close(self) -> None:
        """Release the backend (a later step asks for a reset, as before the first one)."""
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.close()
        self._snap = None
        super().close()

    # ------------------------------------------------------------------ internals
    def _action_keys(self, snap: PageSnapshot, admissible: list[str]) -> dict[str, str]:
        """The key of every admissible action but the search, memoised on what
        :func:`~agent_envs.webshop.rubric.action_key` reads of the page."""
        memo_key = (self._goal_tokens, snap.done, snap.has_search_bar,
                    tuple(snap.clickable_kinds.items()), tuple(snap.link_titles.items()))
        keys = _PAGE_ACTION_KEYS.get(memo_key)
        if keys is None:
            keys = {a: rb.action_key(snap, self._goal_tokens, a) for a in admissible if a != SEARCH_ACTION}
            bounded_put(_PAGE_ACTION_KEYS, memo_key, keys, _ACTION_KEY_PAGES)
        return dict(keys)

    def _obs(self) -> str:
        snap = self.page
        return snap.text if self.observation_mode == "text" else snap.text_rich

    def _info(self, valid: bool, task_reward: float, penalty: float, feedback: str,
              last_key: str | None) -> dict[str, Any]:
        snap = self.page
        goal = self.goal
        sig = self._tracker.signature()
        admissible = self.admissible_actions()
        score = float(snap.score) if snap.score is not None else 0.0
        info = rubric_info(
            admissible_actions=admissible,
            task={"id": f"webshop/{goal.kind}/{goal.index}", "goal": goal.instruction, "type": "webshop"},
            rubric=self._status,
            keys={"exact": rb.exact_key(snap), "coarse": rb.coarse_key(snap, self._status), "signature": sig.key()},
            state_key=_state_key(snap),
            won=bool(snap.done and score >= rb.SOLVED_THRESHOLD),
            score=score,
            valid=bool(valid),
            task_reward=task_reward,
            penalty=penalty,
            signature=sig.symbols,
            feedback=feedback,
            action_key=last_key,
            action_keys=self._action_keys(snap, admissible),
            page=snap.page,
            steps=self._steps,
            tagger=self.tagger.name,
            catalogue=self.catalogue.description,
        )
        if snap.done:
            info["reward_info"] = dict(snap.purchase) if snap.purchase is not None else None
        return info
