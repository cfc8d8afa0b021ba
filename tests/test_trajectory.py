"""The shared data model: construction, validation and exact JSONL round trips."""

from __future__ import annotations

import json
import math

import pytest

from rubrics.trajectory import Step, Trajectory, TrajectoryFormatError, load_jsonl, save_jsonl


def _traj(slot: int = 0) -> Trajectory:
    sig = (frozenset({"target_acquired"}), frozenset({"target_in_hand", "target_placed"}))
    steps = [
        Step(
            state_key=("kitchen", "countertop 1", None),
            action="take apple 1 from countertop 1",
            reward=0.0,
            penalty=-0.1,
            valid=False,
            observation="You arrive at countertop 1. On it you see an apple 1.",
            feedback="Nothing happens.",
            rubric={"target_acquired": 0, "target_in_hand": False, "light_on": 0.5},
            keys={"exact": ("pick", "countertop 1", frozenset({"apple 1"})), "signature": sig},
            next_state_key=("kitchen", "countertop 1", None),
            extra={"tokens": [1, 2, 3], "by_id": {1: "x", (2, 3): "y"}, "nan": math.nan},
        ),
        Step(state_key="s1", action="go to fridge 1", reward=10.0, next_state_key="s2"),
    ]
    return Trajectory(task_id=("pick", 7), slot=slot, steps=steps, score=1.0, success=True)


def test_action_key_defaults_to_action() -> None:
    assert Step("s", "open fridge 1").action_key == "open fridge 1"
    assert Step("s", "click[buy now]", action_key="<buy>").action_key == "<buy>"


def test_row_reward_and_outcome() -> None:
    t = _traj()
    # row rewards: 0 + (-0.1) and 10 + 0; outcome O = 0 + 10
    assert [s.row_reward for s in t.steps] == [-0.1, 10.0]
    assert t.outcome == 10.0


def test_bad_types_raise() -> None:
    with pytest.raises(TypeError, match="action must be a str"):
        Step("s", 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="reward must be a number"):
        Step("s", "a", reward="10")  # type: ignore[arg-type]


def test_jsonl_round_trip_is_exact_and_hashable(tmp_path) -> None:
    trajs = [_traj(0), _traj(1)]
    path = tmp_path / "sub" / "r.jsonl"
    save_jsonl(path, trajs)
    back = load_jsonl(path)
    assert len(path.read_text().splitlines()) == 2
    # NaN != NaN, so compare that field separately and the rest with ==
    for a, b in zip(trajs, back):
        assert math.isnan(b.steps[0].extra.pop("nan"))
        a.steps[0].extra.pop("nan")
        assert a == b
    step = back[0].steps[0]
    assert isinstance(step.state_key, tuple) and hash(step.state_key) == hash(trajs[0].steps[0].state_key)
    assert isinstance(step.keys["exact"][2], frozenset)
    assert step.keys["signature"][1] == frozenset({"target_in_hand", "target_placed"})
    assert step.extra["by_id"][(2, 3)] == "y"
    assert back[0].task_id == ("pick", 7)


def test_a_dict_that_looks_like_a_tag_survives(tmp_path) -> None:
    t = Trajectory("t", 0, [Step("s", "a", extra={"x": {"$tuple": [1, 2]}})])
    save_jsonl(tmp_path / "r.jsonl", [t])
    assert load_jsonl(tmp_path / "r.jsonl")[0].steps[0].extra == {"x": {"$tuple": [1, 2]}}


def test_unencodable_value_is_named(tmp_path) -> None:
    t = Trajectory("t", 0, [Step("s", "a", extra={"obj": object()})])
    with pytest.raises(TypeError, match="cannot encode a value of type object"):
        save_jsonl(tmp_path / "r.jsonl", [t])
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "r.jsonl:2: not a valid trajectory"),
        ('{"slot": 0}', "missing fields \\['task_id'\\]"),
        ('{"task_id": "t", "slot": 0, "steps": [{"bogus": 1}]}', "unknown fields"),
        ('[1, 2]', "must be a JSON object"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, line: str, message: str) -> None:
    path = tmp_path / "r.jsonl"
    good = json.dumps(_traj().to_dict()["steps"] and Trajectory("t", 0).to_dict())
    path.write_text(good + "\n" + line + "\n")
    with pytest.raises(TrajectoryFormatError, match=message) as info:
        load_jsonl(path)
    assert f"{path}:2:" in str(info.value)


@pytest.mark.parametrize(
    "raw, message",
    [
        # each was a bare error naming neither file nor line
        (b'{"task_id": "t", "slot": 0, "score": "\xff"}', "not valid UTF-8"),  # UnicodeDecodeError
        (b'{"task_id": "t", "slot": 1e999}', "cannot convert float infinity to integer"),  # OverflowError
        (b"[" * 3000 + b"]" * 3000, "JSON nested too deeply"),  # RecursionError
    ],
    ids=["invalid-utf8", "slot-1e999", "deep-nesting"],
)
def test_corrupt_bytes_name_file_and_line(tmp_path, raw: bytes, message: str) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(json.dumps(Trajectory("t", 0).to_dict()).encode() + b"\n" + raw + b"\n")
    with pytest.raises(TrajectoryFormatError, match=f"{path}:2: .*{message}"):
        load_jsonl(path)


def test_step_takes_numpy_scalar_rewards_and_refuses_bools() -> None:
    import numpy as np

    from rubrics.trajectory import Step

    step = Step(state_key="s", action="look", reward=np.float32(10.0), penalty=np.int64(0))
    assert step.reward == 10.0 and type(step.reward) is float and type(step.penalty) is float
    for bad in (True, np.bool_(True), "10"):
        with pytest.raises(TypeError, match="Step.reward must be a number"):
            Step(state_key="s", action="look", reward=bad)
