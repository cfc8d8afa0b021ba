"""The engine's speed aids change time, never results.

* The transition memo (:class:`agent_envs.alfworld.engine.TransitionMemo`) and the memoised
  derivations: episodes that revisit states through different action histories (siblings of
  one game, a small action menu) are identical, step by step, with the memo on and off, and
  the memo did answer steps and the lagging engine did catch up by replaying operators.
* The translations kept on disk: a process that loads them plays the episodes a process
  that translates plays; a corrupt cache file is ignored with a warning naming it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("textworld", reason="needs the ALFWorld engine: pip install -e '.[alfworld]'")

import gymnasium as gym

import agent_envs  # noqa: F401
from agent_envs.alfworld import engine


def _canon(value: object) -> str:
    """JSON with sets sorted (frozensets print in hash order)."""
    return json.dumps(value, sort_keys=True,
                      default=lambda o: sorted(map(str, o)) if isinstance(o, (set, frozenset)) else str(o))


def _play(env: gym.Env, tasks: list[int], episodes: int, steps: int) -> list[str]:
    """Random episodes over a small action menu (the first four admissible actions, so
    histories differ but states recur), recorded in full."""
    trace = []
    for task in tasks:
        rng = np.random.default_rng(task)
        for _ in range(episodes):
            obs, info = env.reset(seed=task, options={"task": task})
            trace.append(_canon([obs, info]))
            for _ in range(steps):
                menu = info["admissible_actions"][:4]
                obs, r, term, trunc, info = env.step(menu[int(rng.integers(len(menu)))])
                trace.append(_canon([obs, r, term, trunc, info]))
                if term or trunc:
                    break
    return trace


@pytest.mark.slow
def test_transition_memo_plays_identical_episodes() -> None:
    memo = engine.transition_memo()
    env = gym.make("ALFWorld-Rubric-v0", split="generated", max_steps=12)
    try:
        memo.enabled = False
        direct = _play(env, [0, 7, 13], episodes=4, steps=12)
        memo.enabled = True
        memo.clear()
        memoised = _play(env, [0, 7, 13], episodes=4, steps=12)
        stats = memo.stats()
    finally:
        memo.enabled = True
        env.close()
    assert len(direct) > 100
    assert memoised == direct
    # the memo answered steps, and steps after a hit made the lagging engine replay
    assert stats["transition_hits"] > 20 and stats["transition_replayed"] > 5


def _lock_step(tasks: list[int], steps: int, *, together: bool) -> tuple[list[list[str]], list[gym.Env]]:
    """One environment per task, random episodes (memo off: every step runs the engine), played
    one step each in turn (``together``) or one environment after the other."""
    envs = [gym.make("ALFWorld-Rubric-v0", split="generated", max_steps=steps) for _ in tasks]
    traces: list[list[str]] = [[] for _ in tasks]
    rngs = [np.random.default_rng(k) for k in range(len(tasks))]
    infos = []
    for k, (env, task) in enumerate(zip(envs, tasks)):
        obs, info = env.reset(seed=0, options={"task": task})
        traces[k].append(_canon([obs, info]))
        infos.append(info)
    order = [k for _ in range(steps) for k in range(len(tasks))] if together else \
        [k for k in range(len(tasks)) for _ in range(steps)]
    for k in order:
        menu = infos[k]["admissible_actions"]
        obs, r, term, trunc, infos[k] = envs[k].step(menu[int(rngs[k].integers(len(menu)))])
        traces[k].append(_canon([obs, r, term, trunc, infos[k]]))
    return traces, envs


@pytest.mark.slow
def test_engines_sharing_a_library_play_as_engines_alone(monkeypatch) -> None:
    from collections import OrderedDict

    memo = engine.transition_memo()
    tasks = [3, 3, 11]  # two engines of one game, one of another
    try:
        memo.enabled = False
        alone, envs = _lock_step(tasks, 10, together=False)
        for env in envs:
            env.close()
        together, envs = _lock_step(tasks, 10, together=True)
        shared = _inner_engine(envs[0])._glib is _inner_engine(envs[1])._glib is not _inner_engine(envs[2])._glib
        for env in envs:
            env.close()
        # one library for the process, reloaded when its registry passes 3 states: every turn
        # of the other game's engine takes it over, every engine rebuilds its state again and again
        monkeypatch.setattr(engine, "_GAME_LIBS", 1)
        monkeypatch.setattr(engine, "_game_libs", OrderedDict())
        monkeypatch.setattr(engine._GameLib, "MAX_STATES", 3)
        pressed, envs = _lock_step(tasks, 10, together=True)
        generations = _inner_engine(envs[0])._glib.generation
        for env in envs:
            env.close()
    finally:
        memo.enabled = True
    assert shared and sum(map(len, alone)) > 25
    assert together == alone
    assert pressed == alone and generations > 10


def test_derivation_inputs_name_what_a_template_queries() -> None:
    env = gym.make("ALFWorld-Rubric-v0", split="generated")
    env.reset(seed=0, options={"task": 0})
    grammar = _inner_engine(env)._logic.grammar._grammar
    assert engine.derivation_inputs(grammar, "take {o} from {r}") == frozenset()
    assert engine.derivation_inputs(
        grammar, "go to [{r.name | receptacleatlocation(r:receptacle, lend:location)}]"
    ) == frozenset({"receptacleatlocation"})
    # an expression that could read more than its variables is never memoised
    assert engine.derivation_inputs(grammar, "{len(context)}") is None
    env.close()


SCRIPT = r"""
import json, zlib, numpy as np, gymnasium as gym, agent_envs
env = gym.make("ALFWorld-Rubric-v0", split="generated", max_steps=6)
trace = []
for task in (2, 9):
    rng = np.random.default_rng(task)
    obs, info = env.reset(seed=0, options={"task": task})
    trace.append([obs, info["admissible_actions"]])
    for _ in range(6):
        obs, r, te, tr, info = env.step(info["admissible_actions"][int(rng.integers(len(info["admissible_actions"])))])
        trace.append([obs, r, te, tr, info["admissible_actions"], info["won"]])
print(json.dumps({"crc": zlib.crc32(json.dumps(trace).encode()), "n": len(trace)}))
"""


@pytest.mark.slow
def test_translations_kept_on_disk_play_identical_episodes(tmp_path: Path) -> None:
    env = dict(os.environ, RUBRICGYM_CACHE=str(tmp_path / "cache"))
    generated = Path(os.environ.get("RUBRICGYM_CACHE") or Path.home() / ".cache" / "rubricgym") / "alfworld"
    if generated.is_dir():  # reuse the generated games, not the translations
        (tmp_path / "cache").mkdir()
        (tmp_path / "cache" / "alfworld").mkdir()
        for sub in generated.iterdir():
            if sub.name.startswith("generated"):
                (tmp_path / "cache" / "alfworld" / sub.name).symlink_to(sub)

    def run() -> tuple[dict, str]:
        res = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, check=False)
        assert res.returncode == 0, res.stderr[-3000:]
        return json.loads(res.stdout.strip().splitlines()[-1]), res.stderr

    folder = tmp_path / "cache" / "alfworld" / "translations"
    first, _ = run()  # translates and keeps the translations
    kept = sorted(folder.glob("*.pickle"))
    assert len(kept) >= 2
    second, _ = run()  # loads them
    assert second == first and first["n"] > 10
    kept[0].write_bytes(b"not a pickle")
    third, err = run()  # a corrupt file: named, ignored, translated again
    assert third == first
    assert kept[0].name in err and "corrupt" in err


def test_a_fact_states_digest_ignores_order_and_never_names_another_tables_state() -> None:
    env = gym.make("ALFWorld-Rubric-v0", split="generated")
    try:
        env.reset(seed=0, options={"task": 2})
        facts = list(env.unwrapped._state["_facts"])
    finally:
        env.close()
    table, other = engine._FactTable(), engine._FactTable()
    ids = table.encode(facts)
    assert table.digest(ids) == table.digest(table.encode(list(reversed(facts))))
    assert table.digest(ids) != table.digest(table.encode(facts[1:]))
    # another table numbers other facts 0, 1, ...: the same numbers there are another state
    other.encode(list(reversed(facts)))
    assert other.digest(ids) != table.digest(ids)


class _ForgetInitialAtoms(gym.Wrapper):
    """Every reset converts the game's initial atoms again (no shared propositions)."""

    def reset(self, **kwargs):
        engine._initial_atoms.clear()
        return self.env.reset(**kwargs)


@pytest.mark.slow
def test_restored_states_sharing_initial_facts_play_identical_episodes() -> None:
    memo = engine.transition_memo()
    memo.enabled = False  # every step runs the engine on the restored state
    try:
        env = gym.make("ALFWorld-Rubric-v0", split="generated", max_steps=10)
        shared = _play(env, [0, 7], episodes=3, steps=10)
        env.close()
        env = _ForgetInitialAtoms(gym.make("ALFWorld-Rubric-v0", split="generated", max_steps=10))
        own = _play(env, [0, 7], episodes=3, steps=10)
        env.close()
    finally:
        memo.enabled = True
    assert len(shared) > 40 and shared == own


def _inner_engine(env: gym.Env) -> object:
    """The ``RestorablePddlEnv`` inside an environment's engine wrappers."""
    return env.unwrapped._engine.unwrapped


def _actions_view(actions: list) -> list[tuple]:
    return [(a.id, a.name, sorted(map(str, a.mapping.items())), a.command_template, a.feedback_rule) for a in actions]


@pytest.mark.slow
def test_kept_action_specs_and_gathered_infos_equal_upstreams_in_every_state() -> None:
    """The engine's own ``_gather_infos`` (per-game action specs, one fact list, memo keys
    built once per predicate set) gives upstream's game state in every state of random
    play: the same applicable actions, commands, facts and won flag."""
    from textworld.core import GameState
    from textworld.envs.pddl import PddlEnv

    memo = engine.transition_memo()
    env = gym.make("ALFWorld-Rubric-v0", split="generated", max_steps=30)
    checked = 0
    try:
        for task in (0, 7):
            rng = np.random.default_rng(task)
            _, info = env.reset(seed=task, options={"task": task})
            for _ in range(15):
                _, _, term, trunc, _ = env.step(info["admissible_actions"][int(rng.integers(len(info["admissible_actions"])))])
                if term or trunc:
                    break
                inner = _inner_engine(env)
                inner._catch_up()  # the engine at the current state (it may lag after memo hits)
                assert _actions_view(inner._applicable_actions()) == \
                    _actions_view(inner._pddl_state.all_applicable_actions())
                saved = inner.state
                try:
                    memo.enabled = False
                    inner.state = GameState()
                    PddlEnv._gather_infos(inner)
                    upstream = inner.state
                    memo.enabled = True
                    inner.state = GameState()
                    inner._gather_infos()
                    ours = inner.state
                finally:
                    memo.enabled = True
                    inner.state = saved
                assert sorted(ours) == sorted(upstream)
                for key in ("command_templates", "won", "lost", "_valid_commands", "admissible_commands"):
                    assert ours[key] == upstream[key], key
                assert sorted(map(str, ours["_facts"])) == sorted(map(str, upstream["_facts"]))
                assert _actions_view(ours["_valid_actions"]) == _actions_view(upstream["_valid_actions"])
                checked += 1
                _, _, term, trunc, info = env.step("look")
                if term or trunc:
                    break
    finally:
        memo.enabled = True
        env.close()
    assert checked >= 20


def test_derivations_are_keyed_by_the_mapping_they_can_read() -> None:
    """A derivation's memo key keeps of the action's mapping only what the derivation can read:
    a variable it names, or one a query could have bound (which a query then skips).  An
    unnamed variable that is no argument of a queried fact is left out (the second derivation
    is answered from the memo, and equals the grammar's own); one that is an argument of a
    queried fact stays in the key (leaving it out would answer the wrong text)."""
    from textworld.logic import Placeholder

    env = gym.make("ALFWorld-Rubric-v0", split="generated")
    try:
        env.reset(seed=0, options={"task": 0})
        inner = _inner_engine(env)
        memo_grammar, grammar = inner._logic.grammar, inner._logic.grammar._grammar
        state, infos = inner._pddl_state, inner._entity_infos
        placed = sorted(f for f in state.facts if f.name == "inreceptacle")
        receptacle = placed[0].arguments[1]
        inside = [f.arguments[0] for f in placed if f.arguments[1] == receptacle]
        locations = sorted({f.arguments[1] for f in state.facts if f.name == "receptacleatlocation"})[:2]
        template = "[{o.name | inreceptacle(o:object, r:receptacle)}]"

        def derive(extra: object, memoised: bool) -> str:
            mapping = {Placeholder("r", receptacle.type): receptacle, Placeholder("q", extra.type): extra}
            context = {"state": state, "facts": list(state.facts), "entity_infos": infos, "mapping": mapping,
                       "variables": {ph.name: infos[var.name] for ph, var in mapping.items()}}
            return (memo_grammar if memoised else grammar).derive(template, context)

        calls = []
        original = grammar.derive
        grammar.derive = lambda *a, **k: calls.append(1) or original(*a, **k)
        try:
            texts = [derive(extra, True) for extra in (*locations, inside[0], locations[0])]
        finally:
            del grammar.derive
        assert len(calls) == 2  # the second location and the second-to-last derivation were hits
        assert texts == [derive(extra, False) for extra in (*locations, inside[0], locations[0])]
        assert texts[0] == texts[1] != texts[2]  # the object held by the mapping is skipped
        assert infos[inside[0].name].name in texts[0] and infos[inside[0].name].name not in texts[2]
    finally:
        env.close()


def test_a_states_actions_are_built_when_read() -> None:
    """``PddlEnv.step`` reads one action of the previous state's list, the one its command
    names: that one is built (with the state's derived command template), the others are not;
    an action read again is the same object, and slices and negative indices read as a list's."""
    env = gym.make("ALFWorld-Rubric-v0", split="generated", max_steps=5)
    try:
        env.reset(seed=0, options={"task": 3})  # a game's first reset derives (and reads) every action
        env.reset(seed=0, options={"task": 3})
        inner = _inner_engine(env)
        before = inner.state
        actions = before["_valid_actions"]
        assert isinstance(actions, engine._Actions) and not actions._built
        command = next(c for c in before["_valid_commands"] if c.startswith("go to"))
        env.step(command)
        k = before["_valid_commands"].index(command)
        assert sorted(actions._built) == [k]
        chosen = actions[k]
        assert chosen is actions[k] is actions[k - len(actions)] and inner._last_action is chosen
        assert chosen.command_template.format(**inner._game_constants().names) == command
        assert [a.id for a in actions[:2]] == [actions[0].id, actions[1].id]
        with pytest.raises(IndexError):
            actions[len(actions)]
    finally:
        env.close()
