"""ALFWorld-Rubric-v0 on the real engine: API, hand-checked channel traces, errors, fuzzing."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agent_envs  # noqa: F401  (registers the environments)
from agent_envs.alfworld.data import DataNotFoundError
from agent_envs.alfworld.engine import GameFileError
from rubrics import channel_schema, load_template

SYM = {c.name: c.symbol for c in channel_schema("alfworld").values()}


@pytest.fixture(scope="module")
def env(alfworld_data):
    e = gym.make("ALFWorld-Rubric-v0", split="valid_seen", data_root=str(alfworld_data))
    yield e
    e.close()


def _task(env, prefix: str) -> str:
    return next(t for t in env.unwrapped.task_ids() if t.startswith(prefix))


def _status(info) -> str:
    """Compact A H P L B G S X values, e.g. '1 1 0 0 0 0 0 0'."""
    return " ".join(str(int(v)) for v in info["rubric"].values())


def test_reset_info_carries_everything_spec_2_lists(env):
    tid = _task(env, "pick_two_obj_and_place-AlarmClock-None-Dresser-305")
    obs, info = env.reset(options={"task": tid})
    assert obs.startswith("-= Welcome to TextWorld, ALFRED! =-")
    assert "Your task is to: put two alarmclock in dresser." in obs
    assert info["task"]["id"] == tid and info["task"]["type"] == "pick_two_obj_and_place"
    assert info["task"]["goal"] == "put two alarmclock in dresser."
    assert info["task"]["gamefile"].endswith(tid + "/game.tw-pddl")
    assert (info["task"]["target"], info["task"]["destination"], info["task"]["required"]) == ("alarmclock", "dresser", 2)
    assert "help" not in info["admissible_actions"] and "go to desk 1" in info["admissible_actions"]
    # the first decision's status is empty
    assert _status(info) == "0 0 0 0 0 0 0 0"
    assert info["signature"] == ("", "A")  # C = {}, F = {A}: A has no prerequisite
    assert info["state_key"] == obs
    assert (info["won"], info["score"], info["valid"], info["task_reward"], info["penalty"]) == (False, 0.0, True, 0.0, 0.0)
    exact, coarse = info["keys"]["exact"], info["keys"]["coarse"]
    empty = frozenset()
    assert exact == ("pick_two_obj_and_place", None, None, empty, empty, empty, False)
    assert coarse == ("pick_two_obj_and_place", None, False, False, 0, False, 3)
    assert info["keys"]["signature"] == (empty, frozenset({"target_acquired"}))
    assert env.observation_space.contains(obs)


# Hand-checked traces (MCGPO Table 15).  Columns: A H P L B G S X after each transition, i.e.
# the pre-action status of the next decision; signatures (C, F) follow Table 17's templates.
TRACES = {
    "pick_two_obj_and_place-AlarmClock-None-Dresser-305": [
        ("go to desk 1", "0 0 0 0 0 0 0 0", ("", "A")),
        ("take alarmclock 2 from desk 1", "1 1 0 0 0 0 0 0", ("AH", "L")),   # A={ac2}
        ("go to dresser 1", "1 1 0 0 0 0 0 0", ("AH", "L")),
        ("move alarmclock 2 to dresser 1", "1 0 0 1 0 1 0 0", ("ALG", "HS")),  # L={ac2}, G=min(2,1)
        ("take alarmclock 2 from dresser 1", "1 1 0 0 0 0 0 0", ("AH", "L")),  # taken back out: L={}
        ("move alarmclock 2 to dresser 1", "1 0 0 1 0 1 0 0", ("ALG", "HS")),
        ("go to desk 1", "1 0 0 1 0 1 0 0", ("ALG", "HS")),
        ("take alarmclock 1 from desk 1", "2 1 0 1 0 1 0 0", ("AHLG", "S")),  # A={ac1,ac2}
        ("go to dresser 1", "2 1 0 1 0 1 0 0", ("AHLG", "S")),
        ("move alarmclock 1 to dresser 1", "2 0 0 2 0 2 1 0", ("ALGS", "H")),  # G=min(2,2)=2=max
    ],
    "look_at_obj_in_light-AlarmClock-None-DeskLamp-323": [
        ("go to desk 1", "0 0 0 0 0 0 0 0", ("", "AB")),
        ("use desklamp 1", "0 0 0 0 1 1 0 0", ("BG", "A")),  # G = H + B = 0 + 1
        # using the lamp again: the engine keeps isToggled (its feedback says "turn on" again)
        ("use desklamp 1", "0 0 0 0 1 1 0 0", ("BG", "A")),
        ("help", "0 0 0 0 1 1 0 1", ("BG", "A")),  # not an admissible action: X = 1
        ("take alarmclock 2 from desk 1", "1 1 0 0 1 2 1 1", ("AHBGS", "")),  # G = 1 + 1 = 2 = max
    ],
    "pick_clean_then_place_in_recep-ButterKnife-None-CounterTop-8": [
        ("go to countertop 2", "0 0 0 0 0 0 0 0", ("", "A")),  # the knife lies on a countertop: not "placed"
        ("take butterknife 1 from countertop 2", "1 1 0 0 0 0 0 0", ("AH", "P")),
        ("move butterknife 1 to countertop 2", "1 0 0 1 0 1 0 0", ("ALG", "HPS")),  # G = 0 + 1 + 0
        ("take butterknife 1 from countertop 2", "1 1 0 0 0 0 0 0", ("AH", "P")),
        ("go to sinkbasin 1", "1 1 0 0 0 0 0 0", ("AH", "P")),
        ("clean butterknife 1 with sinkbasin 1", "1 1 1 0 0 1 0 0", ("AHPG", "LS")),  # G = 1 + 0 + 0
        ("go to countertop 1", "1 1 1 0 0 1 0 0", ("AHPG", "LS")),
        ("move butterknife 1 to countertop 1", "1 0 1 1 0 3 1 0", ("APLGS", "H")),  # G = 1 + 1 + 1
    ],
    "pick_heat_then_place_in_recep-Apple-None-DiningTable-26": [
        ("go to diningtable 2", "0 0 0 0 0 0 0 0", ("", "A")),
        ("take apple 1 from diningtable 2", "1 1 0 0 0 0 0 0", ("AH", "P")),
        ("go to microwave 1", "1 1 0 0 0 0 0 0", ("AH", "P")),
        ("heat apple 1 with microwave 1", "1 1 1 0 0 1 0 0", ("AHPG", "LS")),
        ("go to diningtable 2", "1 1 1 0 0 1 0 0", ("AHPG", "LS")),
        ("move apple 1 to diningtable 2", "1 0 1 1 0 3 1 0", ("APLGS", "H")),
    ],
    "pick_cool_then_place_in_recep-Apple-None-CounterTop-14": [
        ("go to microwave 1", "0 0 0 0 0 0 0 0", ("", "A")),
        ("open microwave 1", "0 0 0 0 0 0 0 0", ("", "A")),
        ("take apple 1 from microwave 1", "1 1 0 0 0 0 0 0", ("AH", "P")),
        ("go to fridge 1", "1 1 0 0 0 0 0 0", ("AH", "P")),
        ("cool apple 1 with fridge 1", "1 1 1 0 0 1 0 0", ("AHPG", "LS")),
        ("go to coffeemachine 1", "1 1 1 0 0 1 0 0", ("AHPG", "LS")),
        ("move apple 1 to countertop 2", "1 0 1 1 0 3 1 0", ("APLGS", "H")),
    ],
    "pick_and_place_simple-Book-None-SideTable-329": [
        ("go to bed 1", "0 0 0 0 0 0 0 0", ("", "A")),
        ("take book 2 from bed 1", "1 1 0 0 0 0 0 0", ("AH", "L")),
        ("go to sidetable 1", "1 1 0 0 0 0 0 0", ("AH", "L")),
        ("move book 2 to sidetable 1", "1 0 0 1 0 1 1 0", ("ALGS", "H")),
    ],
}


@pytest.mark.parametrize("prefix", sorted(TRACES))
def test_hand_checked_channel_traces(env, prefix):
    _obs, info = env.reset(options={"task": _task(env, prefix)})
    trace = TRACES[prefix]
    total = 0.0
    for k, (action, status, signature) in enumerate(trace):
        _obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        assert (_status(info), info["signature"]) == (status, signature), (k, action, info["feedback"])
        last = k == len(trace) - 1
        assert terminated is last and truncated is False
        assert info["valid"] is (action != "help")
        assert info["task_reward"] == (10.0 if last else 0.0)
    # 10 for the win, -0.1 per invalid action
    assert total == pytest.approx(10.0 - 0.1 * sum(a == "help" for a, _, _ in trace))
    assert info["won"] and info["score"] == 1.0
    assert env.unwrapped._game.spec.max_progress == info["rubric"]["goal_progress"]


def test_lamp_used_again_prints_turn_on_and_stays_on(env):
    env.reset(options={"task": _task(env, "look_at_obj_in_light-AlarmClock-None-DeskLamp-323")})
    env.step("go to desk 1")
    for _ in range(2):
        _obs, _, _, _, info = env.step("use desklamp 1")
        assert info["feedback"] == "You turn on the desklamp 1."
        assert info["rubric"]["light_on"] is True


def test_signatures_follow_the_family_template(env):
    tracker_template = load_template("alfworld", "pick_clean_then_place_in_recep")
    _, info = env.reset(options={"task": _task(env, "pick_clean_then_place_in_recep-ButterKnife-None-CounterTop-8")})
    ever: set[str] = set()
    for action, _, _ in TRACES["pick_clean_then_place_in_recep-ButterKnife-None-CounterTop-8"]:
        _, _, _, _, info = env.step(action)
        C = {k for k, v in info["rubric"].items() if v and k != "invalid_actions"} & set(tracker_template.vocabulary)
        ever |= C
        assert info["keys"]["signature"] == (frozenset(C), tracker_template.frontier(C, ever))


def test_observation_adds_location_and_held_object_and_keeps_feedback(env):
    env.reset(options={"task": _task(env, "pick_and_place_simple-Book-None-SideTable-329")})
    obs, _, _, _, info = env.step("go to bed 1")
    assert obs.startswith(info["feedback"]) and info["feedback"].startswith("You arrive at bed 1.")
    assert obs.endswith("\n\nLocation: bed 1. Holding: nothing.")
    obs, _, _, _, info = env.step("Take  Book 2 from BED 1 ")  # case and spaces are normalised
    assert info["valid"] and info["action"] == "take book 2 from bed 1"
    assert obs == "You pick up the book 2 from the bed 1.\n\nLocation: bed 1. Holding: book 2."
    assert info["keys"]["exact"][:4] == ("pick_and_place_simple", "bed 1", "book 2", frozenset({"book 2"}))
    # remaining 48 of 50 -> bin 3
    assert info["keys"]["coarse"][:7] == ("pick_and_place_simple", "bed 1", True, False, 0, False, 3)


def test_task_by_index_id_and_path_is_the_same_and_seeding_is_reproducible(env):
    ids = env.unwrapped.task_ids()
    assert len(ids) == 140 and ids == sorted(ids)
    _, by_index = env.reset(options={"task": 5})
    _, by_id = env.reset(options={"task": ids[5]})
    _, by_path = env.reset(options={"task": by_index["task"]["gamefile"]})
    assert by_index["task"]["id"] == by_id["task"]["id"] == by_path["task"]["id"] == ids[5]
    assert by_path["task"]["index"] == 5
    o1, i1 = env.reset(seed=123)
    o2, i2 = env.reset(seed=123)
    assert (o1, i1["task"]["id"]) == (o2, i2["task"]["id"])


def test_bad_tasks_and_actions_raise_clear_errors(env, tmp_path):
    with pytest.raises(ValueError, match=r"task_ids\('valid_seen'\)"):
        env.reset(options={"task": "no_such_task/trial_0"})
    with pytest.raises(ValueError, match="out of range"):
        env.reset(options={"task": 140})
    with pytest.raises(ValueError, match="unknown ALFWorld split"):
        env.reset(options={"split": "test"})
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"tsk": 0})
    env.reset(options={"task": 0})
    with pytest.raises(TypeError, match="must be str"):
        env.step(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        env.step(None)  # type: ignore[arg-type]
    bad = tmp_path / "broken" / "game.tw-pddl"
    bad.parent.mkdir()
    bad.write_text('{"pddl_domain": "(define", "grammar"', encoding="utf-8")
    with pytest.raises(GameFileError, match=str(bad)):
        env.reset(options={"task": str(bad)})
    bad.write_text(json.dumps({"pddl_domain": "x"}), encoding="utf-8")
    with pytest.raises(GameFileError, match="missing or empty grammar, pddl_problem"):
        env.reset(options={"task": str(bad.parent)})


def test_missing_data_names_the_install_command(tmp_path):
    e = gym.make("ALFWorld-Rubric-v0", split="valid_unseen", data_root=str(tmp_path))
    with pytest.raises(DataNotFoundError, match="rubricgym data alfworld"):
        e.reset(seed=0)


def test_invalid_actions_cost_the_penalty_and_the_horizon_truncates(alfworld_data):
    e = gym.make("ALFWorld-Rubric-v0", split="valid_seen", data_root=str(alfworld_data), max_steps=3)
    _obs0, info0 = e.reset(options={"task": 0})
    rewards = []
    for k in range(3):
        _obs, r, term, trunc, info = e.step("fly to the moon")
        rewards.append(r)
        assert (info["valid"], info["penalty"], info["feedback"], term) == (False, -0.1, "Nothing happens.", False)
        assert trunc is (k == 2)
        assert info["admissible_actions"] == info0["admissible_actions"]  # nothing changed
    assert rewards == [-0.1, -0.1, -0.1]
    assert info["rubric"]["invalid_actions"] == 3 and info["keys"]["coarse"][6] == 0  # 0 of 3 left
    with pytest.raises(RuntimeError, match="reset"):
        e.step("look")
    e.close()


FUZZ = ["", " ", "\x00", "\n\t\r", "go to desk 1\x00", "é" * 50, "🙂 take apple", "a" * 100_000,
        "\x1b[31mlook\x1b[0m", "go to", "take  from ", "}{%s%d", "help"]


@pytest.mark.parametrize("action", FUZZ, ids=range(len(FUZZ)))
def test_fuzz_strings_are_invalid_steps_never_crashes(env, action):
    env.reset(options={"task": 3})
    obs, reward, terminated, _truncated, info = env.step(action)
    assert (reward, info["valid"], terminated) == (-0.1, False, False)
    assert env.observation_space.contains(obs)
    assert len(info["action"]) <= 1000


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=300))
def test_fuzz_random_text_never_crashes(env, action):
    if env.unwrapped._done or env.unwrapped._game is None:
        env.reset(options={"task": 7})
    obs, reward, _terminated, _truncated, _info = env.step(action)
    assert isinstance(obs, str) and reward in (0.0, -0.1, 10.0)


def test_state_key_modes(alfworld_data):
    kw = {"split": "valid_seen", "data_root": str(alfworld_data)}
    fb = gym.make("ALFWorld-Rubric-v0", state_key="feedback", **kw)
    fb.reset(options={"task": 0})
    _, _, _, _, info = fb.step("go to desk 1")
    assert info["state_key"] == info["feedback"]
    facts = gym.make("ALFWorld-Rubric-v0", state_key="facts", **kw)
    tid = _task(facts, "pick_and_place_simple-Book-None-SideTable-329")
    _, info0 = facts.reset(options={"task": tid})
    # Two paths to the same world state share the fact key; different states do not.
    _, _, _, _, a = facts.step("go to bed 1")
    _, info = facts.reset(options={"task": tid})
    _, _, _, _, b1 = facts.step("go to sidetable 1")
    _, _, _, _, b = facts.step("go to bed 1")
    assert a["state_key"] == b["state_key"]
    assert len({info0["state_key"], a["state_key"], b1["state_key"]}) == 3
    # The domain's "inventory" action sets checked(agent): a (tiny) change of world state.
    _, _, _, _, c = facts.step("inventory")
    assert c["state_key"] != b["state_key"]
    assert info["state_key"] == info0["state_key"] and len(info0["state_key"]) == 40
    with pytest.raises(ValueError, match="state_key"):
        gym.make("ALFWorld-Rubric-v0", state_key="history", **kw)


def test_check_env_on_a_real_game(alfworld_data):
    from gymnasium.utils.env_checker import check_env

    e = gym.make("ALFWorld-Rubric-v0", split="valid_unseen", data_root=str(alfworld_data))
    check_env(e.unwrapped, skip_render_check=True)
    e.close()
