"""What the arena's policies read off a Sokoban grid (agent_envs/sokoban/features.py), with values
derived by hand on small grids, and how the arena's featurizers find them through the family."""

from __future__ import annotations

import numpy as np
import pytest

import agent_envs  # noqa: F401  (registers the families)
from agent_envs.family import family_of_task, get_family, load_entry
from agent_envs.rollout import Turn
from agent_envs.sokoban.features import grid_features
from trainers.arena.policy import (
    Featurizer,
    LinearSoftmaxPolicy,
    add_observation_features,
    make_featurizer,
)

MOVES = ("up", "down", "left", "right")


def _named(grid: str) -> dict[str, set[str]]:
    return dict(zip(MOVES, (set(f) for f in grid_features(grid, MOVES)), strict=True))


def test_a_push_onto_the_target_and_the_walks_beside_it() -> None:
    # player (1,2), box (1,3), target (1,4); the only push spot is where the player stands
    feats = _named("#######\n#_PXO_#\n#_____#\n#######")
    assert feats["right"] == {"sk|push", "sk|box_closer", "sk|on_target"}
    assert feats["up"] == {"sk|wall"}
    # leaving: one step farther from the box (Manhattan 1 -> 2) and from the push spot (0 -> 1)
    assert feats["left"] == {"sk|walk", "sk|near_farther", "sk|spot_farther"}
    assert feats["down"] == {"sk|walk", "sk|near_farther", "sk|spot_farther"}
    assert all(v == 1.0 for f in grid_features("#######\n#_PXO_#\n#_____#\n#######", MOVES) for v in f.values())


def test_a_push_into_a_corner_is_dead_and_walking_round_the_box_nears_the_push_spot() -> None:
    # player (3,1) below the box (2,1); target (3,4).  Pushing up puts the box in the corner (1,1)
    # (walls above and to the left): Manhattan to the target 4 -> 5.  The push spot is (1,1)
    # (from there a push down brings the box to (3,1), 3 from the target); walking there round
    # the box takes 4 steps from (3,1) and 3 from (3,2), though (3,2) is farther from the box.
    feats = _named("######\n#____#\n#X___#\n#P__O#\n######")
    assert feats["up"] == {"sk|push", "sk|box_farther", "sk|dead"}
    assert feats["right"] == {"sk|walk", "sk|near_farther", "sk|spot_closer"}
    assert feats["left"] == feats["down"] == {"sk|wall"}


def test_a_box_against_a_wall_is_stuck_and_a_push_off_a_target_says_so() -> None:
    assert _named("#####\n#O__#\n#_PX#\n#####")["right"] == {"sk|stuck"}
    # the box on its target (1,2) pushed to (1,3): 0 -> 1 from its own target, not a corner
    # (floor on both sides along the corridor)
    assert _named("######\n#P√__#\n######")["right"] == {"sk|push", "sk|box_farther", "sk|off_target"}


def test_a_push_spot_reached_and_a_level_push() -> None:
    # player (2,1); box (2,3); target (1,4).  Spots: (2,2) (push right: 2 -> 1) and (3,3) (push
    # up: 2 -> 1).  Right walks onto the spot (2,2); a push of the box up from below is "closer".
    feats = _named("######\n#___O#\n#P_X_#\n#____#\n######")
    assert feats["right"] == {"sk|walk", "sk|near_closer", "sk|spot_closer", "sk|at_spot"}
    # box (1,2) pushed right into the corner (1,3) (walls above and to the right): 1 -> 2
    assert _named("#####\n#PX_#\n#_O_#\n#####")["right"] == {"sk|push", "sk|box_farther", "sk|dead"}
    # box (1,3) pushed to (1,4), floor on both sides: 4 -> 5 from the target (3,1)
    assert _named("#######\n#_PX__#\n#_____#\n#O____#\n#######")["right"] == {"sk|push", "sk|box_farther"}
    # two free targets (1,1) and (1,6): box (1,3) -> (1,4) is 2 from the nearest either way
    assert _named("########\n#OPX__O#\n#_____X#\n########")["right"] == {"sk|push", "sk|box_level"}


def test_text_that_is_not_a_grid_and_actions_that_are_not_moves_get_nothing() -> None:
    assert grid_features("You are in a kitchen.", ["up", "look"]) == [{}, {}]
    assert grid_features("#####\n#PXO#\n#####", ["look", "right"])[0] == {}


def test_the_family_declares_the_reader_and_the_task_type_finds_it() -> None:
    fam = get_family("sokoban")
    assert load_entry(fam.observation_features) is grid_features
    assert family_of_task("sokoban") is fam
    assert family_of_task("webshop").observation_features is None
    assert family_of_task("no such type") is None


def _plain(feat, policy: str, grid: str, task_type: str):
    """The featurizer's decision without the family hook."""
    goal = "Push the box onto the target."
    if policy == "rubric":
        return feat.decision(goal=goal, task_type=task_type, observation=grid, actions=list(MOVES))
    return feat.decision(goal=goal, observation=grid, actions=list(MOVES))


@pytest.mark.parametrize("policy", ["rubric", "text"])
def test_both_arena_policies_add_the_grid_features_on_sokoban_only(policy: str) -> None:
    feat = make_featurizer(policy, 2**12)
    index = feat.index if policy == "rubric" else feat._hash.index
    grid = "#######\n#_PXO_#\n#_____#\n#######"
    turn = Turn(group=0, slot=0, t=0, observation=grid, info={})
    decide = {t: feat.turn_decision(turn, goal="Push the box onto the target.", actions=list(MOVES), task={},
                                    task_type=t) for t in ("sokoban", "webshop")}
    for task_type, d in decide.items():
        base = _plain(feat, policy, grid, task_type)
        n = len(base.indices)
        assert np.array_equal(d.indices[:n], base.indices) and np.array_equal(d.owner[:n], base.owner)
        added = [(int(o), int(i)) for o, i in zip(d.owner[n:], d.indices[n:], strict=True)]
        if task_type == "webshop":
            assert added == []
            continue
        want = [(k, index(name)) for k, f in enumerate(grid_features(grid, MOVES)) for name in f]
        assert added == want and np.all(d.values[n:] == 1.0)
    # a weight on "push a box onto a target" makes the policy push right, and only on Sokoban
    right = MOVES.index("right")
    pol = LinearSoftmaxPolicy(2**12)
    pol.weights[index("sk|on_target")] = 5.0
    assert int(np.argmax(pol.probabilities(decide["sokoban"]))) == right
    assert np.allclose(pol.probabilities(decide["webshop"]), 0.25)


def test_a_family_without_a_reader_gets_the_same_decision_back() -> None:
    feat = Featurizer(2**10)
    d = feat.decision(goal="put a clean apple in fridge", task_type="pick_clean_then_place_in_recep",
                      observation="#####\n#PXO#\n#####", actions=["go to fridge 1", "right"])
    assert add_observation_features(d, task_type="pick_clean_then_place_in_recep",
                                    observation="#####\n#PXO#\n#####", index=feat.index) is d
