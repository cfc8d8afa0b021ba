"""Sibling-group rollouts on the real ALFWorld engine (in-process and in worker processes)."""

from __future__ import annotations

import re

import pytest
from counter_env import CountTo  # tests/ is on sys.path

from agent_envs.rollout import GroupRunner, Turn, matching_keys, per_episode, rollout_group
from rubrics.trajectory import load_jsonl, save_jsonl

TASK = "pick_and_place_simple-Book-None-SideTable-329/trial_T20190908_050633_745514"
WALK = ["go to bed 1", "take book 2 from bed 1", "go to sidetable 1", "move book 2 to sidetable 1"]


def scripted(turns):
    """Slot 0 solves, slot 1 first says something invalid then solves, slot 2 only looks."""
    out = []
    for t in turns:
        if t.slot == 0:
            out.append(WALK[t.t])
        elif t.slot == 1:
            out.append("dance" if t.t == 0 else WALK[t.t - 1])
        else:
            out.append("look")
    return out


@pytest.fixture(scope="module")
def env_kwargs(alfworld_data):
    return {"split": "valid_seen", "data_root": str(alfworld_data), "max_steps": 6}


def test_sibling_group_trajectories_are_filled_from_info(env_kwargs, tmp_path):
    trajs = rollout_group("ALFWorld-Rubric-v0", TASK, scripted, group_size=3, env_kwargs=env_kwargs)
    assert [t.slot for t in trajs] == [0, 1, 2]
    assert {t.task_id for t in trajs} == {TASK}
    assert len({t.steps[0].observation for t in trajs}) == 1  # identical start states
    solve, detour, idle = trajs

    assert [s.action for s in solve.steps] == WALK
    assert [s.reward for s in solve.steps] == [0.0, 0.0, 0.0, 10.0]
    assert (solve.success, solve.score, solve.truncated, solve.outcome) == (True, 1.0, False, 10.0)
    assert all(s.valid and s.penalty == 0.0 for s in solve.steps)
    # rubric is the PRE-action status: empty at t=0, "holding the book" before t=2
    assert not any(solve.steps[0].rubric.values())
    assert (solve.steps[2].rubric["target_acquired"], solve.steps[2].rubric["target_in_hand"]) == (1, True)
    A, H, L = "target_acquired", "target_in_hand", "target_placed"
    assert solve.steps[2].keys == {
        "exact": ("pick_and_place_simple", "bed 1", "book 2", frozenset({"book 2"}), frozenset(), frozenset(), False),
        # horizon 6, 2 steps taken: remaining 4/6 = .67 -> bin 2 (cuts at .25/.5/.75)
        "coarse": ("pick_and_place_simple", "bed 1", True, False, 0, False, 2),
        "signature": (frozenset({A, H}), frozenset({L})),
    }
    assert solve.steps[2].extra == {"signature": ["AH", "L"]}
    for a, b in zip(solve.steps, solve.steps[1:]):
        assert a.next_state_key == b.state_key and a.feedback == b.observation
    assert solve.steps[-1].next_state_key.startswith("You move the book 2 to the sidetable 1.")

    assert (detour.steps[0].valid, detour.steps[0].penalty, detour.steps[0].reward) == (False, -0.1, 0.0)
    assert detour.steps[0].action == "dance"
    assert detour.steps[0].feedback == "Nothing happens.\n\nLocation: the middle of the room. Holding: nothing."
    assert detour.success and len(detour) == 5 and detour.steps[1].rubric["invalid_actions"] == 1

    assert (len(idle), idle.success, idle.truncated, idle.score) == (6, False, True, 0.0)

    path = tmp_path / "group.jsonl"
    save_jsonl(path, trajs)
    assert load_jsonl(path) == trajs


def test_worker_processes_give_the_same_trajectories(env_kwargs):
    seq = rollout_group("ALFWorld-Rubric-v0", TASK, scripted, group_size=3, env_kwargs=env_kwargs)
    par = rollout_group("ALFWorld-Rubric-v0", TASK, scripted, group_size=3, env_kwargs=env_kwargs, workers=2)
    assert par == seq


def test_runner_reuses_environments_across_groups(env_kwargs):
    calls = []

    def policy(turns):
        calls.append(len(turns))
        return scripted(turns)

    with GroupRunner("ALFWorld-Rubric-v0", env_kwargs) as runner:
        g1 = runner.run([TASK, TASK], policy, group_size=3)
        envs = dict(runner._hosts.local)
        g2 = runner.run([TASK], policy, group_size=3)
        assert all(runner._hosts.local[k] is envs[k] for k in range(3))
    assert g1[0] == g1[1] == g2[0]
    # one batched call per turn with every live episode: 6 at t=0..3, then slot 1 (t=4) + slot 2
    assert calls[:6] == [6, 6, 6, 6, 4, 2]


def test_any_environment_factory_works():
    trajs = rollout_group(CountTo, 1, per_episode(lambda obs, info: "up"), group_size=2)
    assert [[s.state_key for s in t.steps] for t in trajs] == [["1", "2"], ["1", "2"]]
    assert [s.reward for s in trajs[0].steps] == [0.0, 1.0] and trajs[0].task_id == "group-0"
    assert trajs[0].steps[0].keys == {} and trajs[0].steps[-1].next_state_key == "3"


def test_a_policy_ends_an_episode_with_none_without_a_step():
    """``None`` ends that episode there (truncated, no step); its siblings play on, in lock
    step (``run``) and on their own (``arun``), with the same trajectories."""
    import asyncio

    def stop_slot_1_after_one(turn):
        return None if (turn.slot == 1 and turn.t == 1) else "up"

    with GroupRunner(CountTo) as runner:
        sync = runner.run([0], lambda turns: [stop_slot_1_after_one(t) for t in turns], group_size=2)
        assert runner.stats["decisions"] == 3 + 1  # slot 0 counts 0 -> 3; slot 1 made one step

        async def policy(turn):
            return stop_slot_1_after_one(turn)

        asynced = asyncio.run(runner.arun([0], policy, group_size=2))
    for trajs in (sync, asynced):
        done, cut = trajs[0]
        assert [s.state_key for s in done.steps] == ["0", "1", "2"] and [s.reward for s in done.steps] == [0, 0, 1]
        assert not done.truncated
        assert [s.state_key for s in cut.steps] == ["0"] and cut.truncated and cut.outcome == 0.0
    with pytest.raises(TypeError, match="or None"):
        rollout_group(CountTo, 0, lambda turns: [(None, {}) for _ in turns], group_size=1)


def test_walkthrough_replay_wins_every_generated_game_and_keeps_its_decisions():
    from agent_envs.agent.walkthrough import WalkthroughReplay
    from agent_envs.alfworld.data import task_walkthrough

    kwargs = {"split": "generated", "generated_n": 12}
    with GroupRunner("ALFWorld-Rubric-v0", kwargs) as runner:
        replay = WalkthroughReplay()
        trajs = [g[0] for g in runner.run([0, 1, 2], replay, group_size=1, seeds=0, options={"split": "generated"})]
        assert all(t.success and not t.truncated for t in trajs)
        plans = [task_walkthrough(d.first_info) for d in replay.decisions if d.turn.t == 0]
        assert [[s.action for s in t.steps] for t in trajs] == plans
        assert len(replay.decisions) == sum(map(len, plans))
        assert all(d.actions[d.index] == plans[d.turn.group][d.turn.t] for d in replay.decisions)
        # a cap, and a walkthrough whose next action is not admissible, end the replay early
        capped = WalkthroughReplay(max_steps=2)
        (short,), = runner.run([0], capped, group_size=1, seeds=0, options={"split": "generated"})
        assert len(short.steps) == 2 and short.truncated and len(capped.decisions) == 2
        refused = WalkthroughReplay(admissible=lambda turn: ["look"])
        (none,), = runner.run([0], refused, group_size=1, seeds=0, options={"split": "generated"})
        assert none.steps == [] and none.truncated and refused.decisions == []


def test_bad_arguments_and_policies():
    with pytest.raises(ValueError, match="task or a seed"):
        rollout_group(CountTo, None, per_episode(lambda o, i: "up"), group_size=2)
    with pytest.raises(ValueError, match="group_size"):
        rollout_group(CountTo, 0, per_episode(lambda o, i: "up"), group_size=0)
    with pytest.raises(ValueError, match="returned 1 actions for 2 turns"):
        rollout_group(CountTo, 0, lambda turns: ["up"], group_size=2)
    with pytest.raises(TypeError, match="str actions"):
        rollout_group(CountTo, 0, lambda turns: [1 for _ in turns], group_size=2)
    with pytest.raises(ValueError, match="workers"):
        GroupRunner(CountTo, workers=-1)


def test_matching_keys_copy_the_layout_and_fill_a_missing_signature():
    C, F = frozenset({"a"}), frozenset({"b"})
    already = {"exact": (1,), "coarse": (2,), "signature": (C, F)}
    keys = matching_keys({"keys": already, "signature": "ignored"})
    assert keys == already and keys is not already
    assert matching_keys({"keys": {"exact": (1,)}, "signature": (C, F)}) == {"exact": (1,), "signature": (C, F)}
    assert matching_keys({}) == {}
    assert Turn(0, 1, 2, "o", {}).history == ()


@pytest.mark.parametrize("when", ["between calls", "during a call"])
def test_a_killed_worker_raises_rollout_worker_error(when):
    """Killed between calls, the next call's send used to raise a bare BrokenPipeError (killed
    mid-call it was already a RolloutWorkerError); both now name the worker and the signal."""
    import os
    import signal
    import threading

    from agent_envs.rollout import EnvPool, RolloutWorkerError

    pool = EnvPool("CartPole-v1", n=2, workers=2)
    try:
        assert len(pool.reset([(0, 1, None), (1, 1, None)])) == 2
        victim = pool.procs[1]
        if when == "between calls":
            os.kill(victim.pid, signal.SIGKILL)
            victim.join(timeout=10)
            call = lambda: pool.step([(0, 0), (1, 0)])
        else:
            timer = threading.Timer(0.5, os.kill, (victim.pid, signal.SIGKILL))
            timer.start()
            call = lambda: [pool.step([(0, 0), (1, 0)]) for _ in range(10**7)]
        with pytest.raises(RolloutWorkerError, match=rf"rollout worker 1 \(pid {victim.pid}\) died: it was killed by signal 9"):
            call()
    finally:
        pool.close()


def test_a_stopped_worker_raises_instead_of_hanging():
    """A worker stopped by SIGSTOP never replies: ``GroupRunner.run`` used to wait forever.  It
    now names the stopped worker; ``close`` kills it (a stopped process ignores SIGTERM)."""
    import os
    import signal
    import threading

    from agent_envs.rollout import EnvPool, RolloutWorkerError

    pool = EnvPool("CartPole-v1", n=2, workers=2)
    victim = pool.procs[1]
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            GroupRunner(pool).run([0], per_episode(lambda obs, info: "unused"), group_size=2)
        except BaseException as exc:  # noqa: BLE001  (checked below)
            outcome.append(exc)

    try:
        assert len(pool.reset([(0, 1, None), (1, 1, None)])) == 2  # both workers are up
        os.kill(victim.pid, signal.SIGSTOP)
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(timeout=120)  # a hang guard, not a time measurement
        hung = thread.is_alive()
        if hung:
            os.kill(victim.pid, signal.SIGCONT)  # let the old code's wait end
            thread.join(timeout=30)
        assert not hung, "GroupRunner.run still waits for the stopped worker"
        assert len(outcome) == 1 and isinstance(outcome[0], RolloutWorkerError), outcome
        assert re.search(rf"rollout worker 1 \(pid {victim.pid}\) is stopped \(by SIGSTOP or SIGTSTP\)", str(outcome[0]))
    finally:
        pool.close()
    assert victim.exitcode == -signal.SIGKILL
