"""The fast reset is exactly a fresh load: traces of our engine vs the unmodified upstream stack."""

from __future__ import annotations

import sys

import pytest

from agent_envs.alfworld import engine

# One game per task type, from both validation splits.
GAMES = [
    "valid_seen/pick_two_obj_and_place-AlarmClock-None-Dresser-305/trial_T20190907_165826_194855",
    "valid_seen/look_at_obj_in_light-AlarmClock-None-DeskLamp-323/trial_T20190909_044715_250790",
    "valid_unseen/pick_heat_then_place_in_recep-Tomato-None-GarbageCan-10/trial_T20190908_225453_272533",
]


def _snapshot(state) -> tuple:
    """Everything observable in a state: texts, commands, the fact set, flags.

    The fact *list*'s order is not compared: upstream's own order depends on the hash seed of
    the process that translated the game (fast-downward's normalisation iterates sets; three
    PYTHONHASHSEED values gave three orders of one game's initial facts, with the same sorted
    facts and the same texts), and a translation kept on disk carries the order of the process
    that made it.
    """
    return (
        state["feedback"],
        tuple(state["admissible_commands"]),
        tuple(state["_valid_commands"]),
        tuple(sorted(str(f) for f in state["_facts"])),
        tuple(sorted((k, v.name) for k, v in state["_entity_infos"].items())),
        tuple(state["command_templates"]),
        bool(state["won"]),
        state.get("extra.gamefile"),
        tuple(state["extra.walkthrough"]),
    )


def _episode(env, commands) -> list[tuple]:
    out = [_snapshot(env.reset())]
    for c in commands:
        state, score, done = env.step(c)
        out.append(_snapshot(state) + (score, done))
    return out


def _commands(walkthrough: list[str]) -> list[str]:
    # The stored solution with detours: an inadmissible command, a look and an inventory.
    return ["look", "fly away", *walkthrough[:2], "inventory", *walkthrough[2:]]


@pytest.fixture(scope="module")
def paths(alfworld_data):
    return [str(alfworld_data / "json_2.1.1" / g / "game.tw-pddl") for g in GAMES]


@pytest.mark.parametrize(
    "game",
    [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)],
    ids=[g.split("/")[1].split("-")[0] for g in GAMES],
)
def test_fast_reset_traces_equal_fresh_upstream_loads(paths, game):
    path, other_path = paths[game], paths[(game + 1) % len(paths)]
    raw = engine.make_raw_engine()
    raw.load(path)
    expected = _episode(raw, _commands(raw.reset()["extra.walkthrough"]))
    assert expected[-1][6] is True  # the walkthrough wins
    commands = _commands(expected[0][8])
    ours = engine.make_engine()
    ours.load(path)
    assert _episode(ours, commands) == expected  # first reset: derives the initial texts
    assert _episode(ours, commands) == expected  # restored grounding + kept texts
    # Another game in between, then back: the library state is reloaded from the kept SAS.
    ours.load(other_path)
    ours.reset()
    ours.load(path)
    assert _episode(ours, commands) == expected
    # A second engine in the same process reuses the translation, the parsed logic and the
    # initial texts of the first; its traces are still upstream's.
    hits = engine.translation_cache_info()["hits"]
    other = engine.make_engine()
    other.load(path)
    assert engine.translation_cache_info()["hits"] == hits + 1
    assert _episode(other, commands) == expected
    for e in (raw, ours, other):
        e.close()


def test_translation_restores_sys_argv_and_reports_corrupt_games(tmp_path, paths):
    argv = list(sys.argv)
    engine.translation_cache_clear()
    e = engine.make_engine()
    e.load(paths[0])
    assert sys.argv == argv  # fast_downward.pddl2sas overwrites sys.argv; we restore it
    assert engine.translation_cache_info()["misses"] == 1
    bad = tmp_path / "game.tw-pddl"
    bad.write_text('{"pddl_domain": "(define (domain x))", "grammar": "{}", "pddl_problem": "(oops"}')
    with pytest.raises(engine.GameFileError, match=str(bad)):
        e.load(str(bad))
    bad.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(engine.GameFileError, match=str(bad)):
        engine.read_game_file(bad)
    e.close()
