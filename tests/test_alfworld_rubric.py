"""ALFWorld rubric channels, keys and goal parsing without the engine (MCGPO Tables 5, 15)."""

from __future__ import annotations

import pytest

from agent_envs.alfworld.game import GoalParseError, TaskSpec, parse_goal, task_sentence
from agent_envs.alfworld.rubric import (
    CHANNELS,
    RubricTracker,
    Snapshot,
    budget_bin,
    coarse_key,
    empty_status,
    exact_key,
)
from rubrics import channel_schema

PICK2 = TaskSpec("pick_two_obj_and_place", "pick", "alarmclock", "dresser", None, 2)
CLEAN = TaskSpec("pick_clean_then_place_in_recep", "clean", "ladle", "countertop", None, 1)
LOOK = TaskSpec("look_at_obj_in_light", "look", "alarmclock", None, "desklamp", 1)
HEAT = TaskSpec("pick_heat_then_place_in_recep", "heat", "apple", "diningtable", None, 1)


def test_channel_names_follow_the_shared_schema():
    assert CHANNELS == tuple(channel_schema("alfworld"))
    assert empty_status() == {
        "target_acquired": 0, "target_in_hand": False, "target_processed": False,
        "target_placed": 0, "light_on": False, "goal_progress": 0, "solved": False,
        "invalid_actions": 0,
    }


def _vals(status):
    return tuple(int(status[c]) for c in CHANNELS)  # A H P L B G S X


def test_pick_two_place_take_back_out_and_place_again():
    t = RubricTracker(PICK2)
    t.reset()
    seq = [
        # (snapshot after the transition, expected A H P L B G S X)
        (Snapshot(held="alarmclock 2", held_is_target=True), (1, 1, 0, 0, 0, 0, 0, 0)),
        # placed: L = {alarmclock 2}; G = min(2, |L|) = 1; A persists
        (Snapshot(in_destination=frozenset({"alarmclock 2"})), (1, 0, 0, 1, 0, 1, 0, 0)),
        # taken back out: L = {} -> 0, G back to 0, A still 1, H again
        (Snapshot(held="alarmclock 2", held_is_target=True), (1, 1, 0, 0, 0, 0, 0, 0)),
        (Snapshot(in_destination=frozenset({"alarmclock 2"})), (1, 0, 0, 1, 0, 1, 0, 0)),
        # the second instance: A = 2 distinct instances
        (Snapshot(held="alarmclock 1", held_is_target=True, in_destination=frozenset({"alarmclock 2"})),
         (2, 1, 0, 1, 0, 1, 0, 0)),
        (Snapshot(in_destination=frozenset({"alarmclock 1", "alarmclock 2"})), (2, 0, 0, 2, 0, 2, 1, 0)),
    ]
    for k, (snap, expect) in enumerate(seq):
        t.update(snap, won=(k == len(seq) - 1), valid=True)
        assert _vals(t.status) == expect, k


def test_pick_two_same_instance_twice_counts_once_and_foreign_objects_do_not_count():
    t = RubricTracker(PICK2)
    t.reset()
    t.update(Snapshot(held="alarmclock 2", held_is_target=True), won=False, valid=True)
    t.update(Snapshot(held="alarmclock 2", held_is_target=True), won=False, valid=True)
    assert t.status["target_acquired"] == 1  # |A| = |{alarmclock 2}| = 1
    t.update(Snapshot(held="cd 1", held_is_target=False), won=False, valid=True)
    assert (t.status["target_acquired"], t.status["target_in_hand"]) == (1, False)
    # an instance lying in the dresser that the agent never handled is not "placed"
    t.update(Snapshot(in_destination=frozenset({"alarmclock 3"})), won=False, valid=True)
    assert t.status["target_placed"] == 0


def test_clean_family_goal_progress_counts_p_l_and_their_intersection():
    t = RubricTracker(CLEAN)
    t.reset()
    t.update(Snapshot(held="ladle 1", held_is_target=True), won=False, valid=True)
    assert _vals(t.status) == (1, 1, 0, 0, 0, 0, 0, 0)
    # placed before cleaning: G = 1[P] + 1[L] + 1[P∩L] = 0 + 1 + 0 = 1
    t.update(Snapshot(in_destination=frozenset({"ladle 1"})), won=False, valid=True)
    assert _vals(t.status) == (1, 0, 0, 1, 0, 1, 0, 0)
    t.update(Snapshot(held="ladle 1", held_is_target=True), won=False, valid=True)
    # cleaned in hand: G = 1 + 0 + 0 = 1
    t.update(Snapshot(held="ladle 1", held_is_target=True, processed=frozenset({"ladle 1"})), won=False, valid=True)
    assert _vals(t.status) == (1, 1, 1, 0, 0, 1, 0, 0)
    # an invalid action changes nothing but the diagnostic counter
    t.update(Snapshot(held="ladle 1", held_is_target=True, processed=frozenset({"ladle 1"})), won=False, valid=False)
    assert _vals(t.status) == (1, 1, 1, 0, 0, 1, 0, 1)
    # placed clean: G = 1 + 1 + 1 = 3 (the family maximum)
    t.update(Snapshot(in_destination=frozenset({"ladle 1"}), processed=frozenset({"ladle 1"})), won=True, valid=True)
    assert _vals(t.status) == (1, 0, 1, 1, 0, 3, 1, 1)
    assert CLEAN.max_progress == 3


def test_processing_history_persists_after_the_predicate_is_cleared():
    # heat, then (as the domain's CoolObject does) ishot is removed: P keeps the instance
    t = RubricTracker(HEAT)
    t.reset()
    t.update(Snapshot(held="apple 1", held_is_target=True, processed=frozenset({"apple 1"})), won=False, valid=True)
    t.update(Snapshot(held="apple 1", held_is_target=True, processed=frozenset()), won=False, valid=True)
    assert t.status["target_processed"] is True
    # a hot apple the agent never held does not count
    t2 = RubricTracker(HEAT)
    t2.reset()
    t2.update(Snapshot(processed=frozenset({"apple 2"})), won=False, valid=True)
    assert t2.status["target_processed"] is False


def test_look_light_follows_the_engine_and_an_off_feedback_clears_it():
    t = RubricTracker(LOOK)
    t.reset()
    t.update(Snapshot(lamp_on=True), won=False, valid=True, feedback="You turn on the desklamp 1.")
    assert _vals(t.status) == (0, 0, 0, 0, 1, 1, 0, 0)  # G = H + B = 0 + 1
    t.update(Snapshot(held="alarmclock 2", held_is_target=True, lamp_on=True), won=True, valid=True)
    assert _vals(t.status) == (1, 1, 0, 0, 1, 2, 1, 0)  # G = 1 + 1 = 2 = max
    t.update(Snapshot(held="alarmclock 2", held_is_target=True, lamp_on=True), won=True, valid=True,
             feedback="You turn off the desklamp 1.")
    assert (t.status["light_on"], t.status["goal_progress"]) == (False, 1)


def test_budget_bins_cut_the_remaining_horizon_at_quarters():
    # remaining/horizon: 50/50 = 1 -> 3; 38/50 = .76 -> 3; 37/50 = .74 -> 2; 25/50 = .5 -> 2;
    # 24/50 = .48 -> 1; 13/50 = .26 -> 1; 12/50 = .24 -> 0; 0 -> 0
    assert [budget_bin(r, 50) for r in (50, 38, 37, 25, 24, 13, 12, 0)] == [3, 3, 2, 2, 1, 1, 0, 0]
    with pytest.raises(ValueError):
        budget_bin(1, 0)


def test_keys_hold_table5_fields_and_the_signature():
    t = RubricTracker(PICK2)
    t.reset()
    t.update(Snapshot(held="alarmclock 2", held_is_target=True), won=False, valid=True)
    C, F = frozenset({"target_acquired", "target_in_hand"}), frozenset({"target_placed"})
    assert exact_key(PICK2, t, "desk 1") == (
        "pick_two_obj_and_place", "desk 1", "alarmclock 2",
        frozenset({"alarmclock 2"}), frozenset(), frozenset(), False,
    )
    # remaining 30 of 50 = 0.6 -> bin 2
    assert coarse_key(PICK2, t, "desk 1", remaining=30, horizon=50) == (
        "pick_two_obj_and_place", "desk 1", True, False, 0, False, 2,
    )
    # the signature beside the keys: active channels and the template's frontier
    from rubrics import SignatureTracker, load_template

    sig = SignatureTracker(load_template("alfworld", "pick_two_obj_and_place"))
    sig.reset()
    sig.update(t.status)
    assert sig.signature().key() == (C, F)


GOALS = {
    "pick_two": """(:goal (and (exists (?r - receptacle) (exists (?o1 - object) (and
        (objectType ?o1 AlarmClockType) (receptacleType ?r DresserType) (inReceptacle ?o1 ?r)
        (exists (?o2 - object) (and (not (= ?o1 ?o2)) (objectType ?o2 AlarmClockType)
        (receptacleType ?r DresserType) (inReceptacle ?o2 ?r))))))))""",
    "look": """(:goal (and (exists (?ot - object ?r - receptacle ?a - agent ?l - location) (and
        (objectType ?ot FloorLampType) (toggleable ?ot) (isToggled ?ot) (receptacleAtLocation ?r ?l)
        (atLocation ?a ?l) (inReceptacle ?ot ?r))) (exists (?o - object ?a - agent) (and
        (objectType ?o CDType) (holds ?a ?o)))))""",
    "heat": """(:goal (and (exists (?r - receptacle) (exists (?o - object) (and (heatable ?o)
        (objectType ?o AppleType) (receptacleType ?r DiningTableType) (isHot ?o) (inReceptacle ?o ?r))))))""",
    "simple": """(:goal (and (exists (?r - receptacle) (exists (?o - object) (and (inReceptacle ?o ?r)
        (objectType ?o BookType) (receptacleType ?r SideTableType))))))""",
}


def test_goal_parsing_per_family():
    assert parse_goal(GOALS["pick_two"]) == TaskSpec("pick_two_obj_and_place", "pick", "alarmclock", "dresser", None, 2)
    assert parse_goal(GOALS["look"]) == TaskSpec("look_at_obj_in_light", "look", "cd", None, "floorlamp", 1)
    assert parse_goal(GOALS["heat"]) == TaskSpec("pick_heat_then_place_in_recep", "heat", "apple", "diningtable", None, 1)
    assert parse_goal(GOALS["simple"]).task_type == "pick_and_place_simple"
    assert PICK2.max_progress == 2 and LOOK.max_progress == 2
    with pytest.raises(GoalParseError):
        parse_goal("(define (problem p) (:init))")
    with pytest.raises(TypeError):
        parse_goal(None)  # type: ignore[arg-type]
    assert task_sentence("-= Welcome =-\n\nYour task is to: put two cd in drawer.") == "put two cd in drawer."
