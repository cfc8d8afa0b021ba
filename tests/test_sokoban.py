"""Sokoban-Rubric-v0: generation by reverse play, the solver, rewards, channels, seeding, and the
paths into it (registry, pool, runner, text episodes, panel, arena)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import agent_envs  # noqa: F401  (registers the families)
from agent_envs import check_rubric_env
from agent_envs.sokoban.expert import plan
from agent_envs.sokoban.room import (
    LEGEND,
    Level,
    dead_squares,
    generate,
    parse_grid,
    render_rgb,
    render_text,
    solve,
    step,
)

ENV = "Sokoban-Rubric-v0"
REPO = Path(__file__).resolve().parents[1]


def _play(room, state, actions):
    for a in actions:
        state, _moved, _pushed = step(room, state, a)
    return state


def _fixed(grid: str, **kwargs):
    """An environment whose every task is the level ``grid``."""
    env = gym.make(ENV, **kwargs)
    room, start = parse_grid(grid)
    env.unwrapped.level = lambda index: Level(room, start, 0)
    return env


# ------------------------------------------------------------------------------- generation


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_every_generated_level_is_solved_by_its_expert(seed: int) -> None:
    """Reverse play makes solvable levels: the shortest solution exists and is no longer than
    the reversed moves (and than the horizon when one is given)."""
    for index in range(120):
        level = generate(seed, index)
        moves = solve(level.room, level.start)
        assert 1 <= len(moves) <= level.reverse_moves <= 30
        end = _play(level.room, level.start, moves)
        assert all(b in level.room.targets for b in end.boxes)
        assert not all(b in level.room.targets for b in level.start.boxes)
        bounded = generate(seed, index, max_solution=15)
        assert len(solve(bounded.room, bounded.start)) <= 15


def test_larger_rooms_and_more_boxes() -> None:
    for index in range(10):
        level = generate(3, index, dim=(8, 8), num_boxes=2, search_depth=40)
        assert len(level.start.boxes) == 2 == len(level.room.targets)
        end = _play(level.room, level.start, solve(level.room, level.start))
        assert set(end.boxes) == set(level.room.targets)
    with pytest.raises(ValueError, match="at least 3x3"):
        generate(0, 0, dim=(2, 9))


def test_levels_are_the_same_on_every_machine() -> None:
    """Pinned grids: random.Random seeded with an explicit integer (no hash(), no platform RNG)."""
    assert render_text(*_start(generate(0, 3))) == "######\n#____#\n#__X_#\n#O__##\n#P_###\n######"
    assert render_text(*_start(generate(0, 1))) == render_text(*_start(generate(0, 1)))
    assert render_text(*_start(generate(0, 1))) != render_text(*_start(generate(1, 1)))


def _start(level: Level):
    return level.room, level.start


def test_text_round_trip_and_legend() -> None:
    grid = "#######\n#P√_O_#\n#_X___#\n#######"
    room, state = parse_grid(grid)
    assert render_text(room, state) == grid
    assert set(LEGEND) == set("#_O√XPS")
    with pytest.raises(ValueError, match="unknown symbol"):
        parse_grid("###\n#?#\n###")
    with pytest.raises(ValueError, match="one player"):
        parse_grid("#####\n#X_O#\n#####")


def test_dead_squares_hand_worked() -> None:
    """In a 2x3 room with the target bottom right, a box in any cell of the top row or the left
    column except the target's neighbours can never come back: it cannot be pushed away from
    a wall it is against."""
    room, _ = parse_grid("#####\n#P_X#\n#__O#\n#####")
    # corners (1,1), (1,3), (2,1) are dead; (1,2) is against the top wall: only left/right
    # pushes, along a row without a target -> dead; (2,2) can be pushed right onto (2,3)
    assert dead_squares(room) == {(1, 1), (1, 2), (1, 3), (2, 1)}


# ------------------------------------------------------------------------------- the environment


def test_check_rubric_env_passes() -> None:
    env = gym.make(ENV)
    check_rubric_env(env)
    check_rubric_env(env, options={"task": 5}, steps=15)
    check_rubric_env(gym.make(ENV, dim=(7, 7), num_boxes=2), options={"task": "sokoban/7x7-2box/2"})


def test_rewards_hand_checked_on_a_fixed_room() -> None:
    """Two boxes, targets at (1,2) (a box on it) and (1,4):
    right pushes the placed box off its target: -0.1 - 1 = -1.1;
    right pushes it onto the other target: -0.1 + 1 = 0.9;
    an invalid string: task reward 0, penalty -0.1, the state unchanged;
    up into the wall: a valid move that changes nothing, -0.1."""
    env = _fixed("#######\n#P√_O_#\n#_X___#\n#######")
    obs, info = env.reset(options={"task": 0})
    assert info["rubric"]["boxes_on_target"] == 1 and info["score"] == 0.5
    obs, r, term, _trunc, info = env.step("right")
    assert (round(r, 9), info["task_reward"], info["penalty"], term) == (-1.1, -1.1, 0.0, False)
    assert obs == "#######\n#_SXO_#\n#_X___#\n#######"
    assert info["rubric"]["boxes_on_target"] == 0
    obs, r, term, _trunc, info = env.step("right")
    assert round(r, 9) == 0.9 and info["rubric"]["boxes_on_target"] == 1 and not term
    before = obs
    obs, r, _term, _trunc, info = env.step("jump")
    assert (r, info["task_reward"], info["penalty"], info["valid"], obs) == (-0.1, 0.0, -0.1, False, before)
    assert info["rubric"]["invalid_actions"] == 1
    obs, r, term, _trunc, info = env.step("up")
    assert (round(r, 9), info["valid"], obs) == (-0.1, True, before)


def test_solving_pays_ten_and_terminates() -> None:
    env = _fixed("######\n#PXO_#\n######")
    _obs, info = env.reset(options={"task": 0})
    assert info["rubric"]["box_pushable"] is True
    obs, r, term, trunc, info = env.step("right")  # -0.1 + 1 + 10
    assert (round(r, 9), term, trunc, info["won"], info["score"], info["admissible_actions"]) == (
        10.9, True, False, True, 1.0, [])
    assert obs == "######\n#_P√_#\n######"


def test_horizon_truncates_after_fifteen_actions() -> None:
    env = _fixed("######\n#PXO_#\n#____#\n######")
    env.reset(options={"task": 0})
    total = 0.0
    for t in range(15):
        _obs, r, term, trunc, _info = env.step("left")  # into the wall
        total += r
        assert trunc == (t == 14) and not term
    assert round(total, 9) == -1.5
    with pytest.raises(RuntimeError, match="has ended"):
        env.step("left")


def test_channels_and_template() -> None:
    from rubrics import channel_schema, load_template

    schema = channel_schema("sokoban")
    assert [c.symbol for c in schema.values()] == list("PBDSX")
    assert [c.name for c in schema.values() if c.diagnostic] == ["invalid_actions"]
    t = load_template("sokoban", "sokoban")
    assert t.frontier(set(), set()) == {"box_pushable"}
    assert t.frontier({"box_pushable"}, set()) == {"boxes_on_target"}
    assert t.frontier({"boxes_on_target"}, {"box_pushable"}) == {"box_pushable", "solved"}
    # a dead-locked box blocks placing and solving, and is never a frontier goal itself
    assert t.frontier({"box_deadlocked"}, {"box_pushable"}) == set()
    env = _fixed("#####\n#PX_#\n#__O#\n#####")
    env.reset(options={"task": 0})
    _obs, _r, _term, _trunc, info = env.step("right")  # the box into the top right corner
    assert info["rubric"]["box_deadlocked"] is True and info["signature"] == ("D", "")  # nothing enabled
    assert info["keys"]["exact"] == ((1, 2), ((1, 3),))


def test_seeding_and_siblings() -> None:
    env, other = gym.make(ENV), gym.make(ENV)
    firsts = [env.reset(seed=s)[1]["task"]["id"] for s in range(6)]
    assert firsts == [other.reset(seed=s)[1]["task"]["id"] for s in range(6)]
    assert len(set(firsts)) > 1
    assert all(int(t.rsplit("/", 1)[1]) < 10_000 for t in firsts)  # the train split
    a, b = env.reset(seed=1, options={"task": 9}), other.reset(seed=2, options={"task": 9})
    assert a[0] == b[0] and a[1]["task"] == b[1]["task"]  # the seed decides nothing else
    assert env.reset(options={"split": "test"})[1]["task"]["index"] >= 11_000


def test_rgb_render() -> None:
    env = gym.make(ENV, render_mode="rgb_array", tile=8)
    env.reset(options={"task": 3})
    img = env.render()
    assert img.shape == (48, 48, 3) and img.dtype == np.uint8
    room, state = _start(env.unwrapped.level(3))
    r, c = state.player
    assert tuple(img[r * 8 + 4, c * 8 + 4]) == (40, 80, 200)  # the player's disc
    assert tuple(img[0, 0]) == (90, 60, 40)  # a wall
    assert np.array_equal(render_rgb(room, state, 8), img)
    ansi = gym.make(ENV, render_mode="ansi")
    assert ansi.reset(options={"task": 3})[0] == ansi.render()


def test_bad_arguments_are_named() -> None:
    env = gym.make(ENV)
    with pytest.raises(ValueError, match="sokoban/6x6-1box/12"):
        env.reset(options={"task": "level twelve"})
    with pytest.raises(ValueError, match="is a 7x7-2box level"):
        env.reset(options={"task": "sokoban/7x7-2box/1"})
    with pytest.raises(ValueError, match="unknown split"):
        gym.make(ENV, split="valid")
    env.reset(options={"task": 1})
    with pytest.raises(TypeError, match="Sokoban actions are strings"):
        env.step(3)


# ------------------------------------------------------------------------------- through the registry


def test_family_declares_everything() -> None:
    from agent_envs.agent.tools import kinds_of, tools_for
    from agent_envs.family import family_of
    from trainers.arena.config import ENV_PRESETS, ArenaConfig
    from trainers.arena.variants import resolve_method
    from wrappers.integrations.trl_env import tool_class

    fam = family_of(ENV)
    assert fam is not None and fam.name == "sokoban"
    assert kinds_of(ENV) == ("up", "down", "left", "right")
    assert [t["function"]["name"] for t in tools_for(["up", "down", "left", "right"])] == list(kinds_of(ENV))
    assert sorted(n for n in vars(tool_class(ENV)) if not n.startswith("_")) == sorted(kinds_of(ENV))
    assert ENV_PRESETS["sokoban"].env_id == ENV
    cfg = ArenaConfig.for_env("sokoban")
    assert cfg.horizon == 15 and cfg.rollout.group_size == 8
    assert resolve_method("graphgpo", "sokoban").params == {"gamma": 0.8}


def test_pool_runner_and_text_episode_reach_it() -> None:
    """The expert through the env pool and the group runner: every sibling of a group starts
    identically and wins; a text episode plays the same level from model-style replies."""
    from agent_envs.agent.walkthrough import WalkthroughReplay
    from agent_envs.rollout import EnvPool, GroupRunner
    from wrappers.integrations.episode import TextEpisode

    with GroupRunner(EnvPool(ENV)) as runner:
        groups = runner.run([3, 8], WalkthroughReplay(), group_size=3)
    for group in groups:
        assert all(t.success for t in group)
        assert len({tuple(s.action for s in t.steps) for t in group}) == 1
    ep = TextEpisode(ENV)
    ep.reset(task=3)
    first = ep.info
    for action in plan(first):
        result = ep.step(f"<action>{action}</action>")
    assert result.done and ep.success and ep.trajectory().task_id == "sokoban/6x6-1box/3"
    ep.close()


def test_trl_tool_environment_plays_it_with_generated_tools() -> None:
    """TRL's environment_factory path: a tool class generated from the family's tool kinds."""
    from wrappers.integrations.trl_env import RubricEnvironments

    factory = RubricEnvironments(ENV)
    env = factory()
    assert "Possible actions: up | down | left | right" in env.reset(task=3)
    moves = plan({"task": {"id": "sokoban/6x6-1box/3", "room": render_text(*_start(generate(0, 3, max_solution=15)))}})
    for a in moves[:-1]:
        assert getattr(env, a)().endswith("Possible actions: up | down | left | right")
    assert "task completed" in getattr(env, moves[-1])()
    # -0.1 per move, +1 onto the target, +10 solved
    assert env.get_reward() == pytest.approx(-0.1 * len(moves) + 11.0)
    (traj,) = factory.pop_trajectories()
    assert traj.success and [s.action for s in traj.steps] == moves
    factory.close()


def test_panel_is_pinned_and_the_expert_solves_every_task() -> None:
    from agent_envs.panels import PANELS, resolve_panel

    panel = resolve_panel("sokoban-6x6-v1")
    assert PANELS["sokoban-6x6-v1"].env_id == ENV and len(panel.tasks) == 200
    assert panel.short_hash == PANEL_HASH
    env = gym.make(ENV, **PANELS["sokoban-6x6-v1"].env_kwargs)
    for task in panel.tasks:
        _obs, info = env.reset(options={"task": task})
        moves = plan(info)
        assert 1 <= len(moves) <= 15
        for a in moves:
            _obs, _r, term, _trunc, info = env.step(a)
        assert term and info["won"], task


#: The panel's hash (a changed generator, environment or ENV_BEHAVIOUR_VERSION changes it).
PANEL_HASH = "f46b7226d607"


@pytest.mark.slow
def test_cli_lists_name_it() -> None:
    for args, name in ((["eval", "--list"], "sokoban-6x6-v1"), (["arena", "--list"], "sokoban")):
        out = subprocess.run([sys.executable, "-m", "trainers.cli", *args], capture_output=True, text=True,
                             check=True, cwd=REPO, env={"COLUMNS": "200", "PATH": ""}).stdout
        assert name in out, out
