"""Asynchronous stepping off the caller's thread (agent_envs.pool) and GroupRunner.arun."""

from __future__ import annotations

import asyncio
import functools
import random
import re
import time
from pathlib import Path

import gymnasium as gym
import pytest
from counter_env import CountTo  # tests/ is on sys.path

from agent_envs.pool import EnvPool, RolloutWorkerError
from agent_envs.rollout import GroupRunner, Turn


class _Gated(gym.Env):
    """``step`` waits (up to 20 s) for a file to appear and reports whether it did: a step run
    on the caller's event loop cannot see the file that loop creates after issuing the step."""

    observation_space = gym.spaces.Text(64)
    action_space = gym.spaces.Text(64)

    def __init__(self, gate: str, wait: float = 20.0) -> None:
        self.gate, self.wait = Path(gate), wait

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "start", {}

    def step(self, action):
        if action == "boom":
            raise ValueError("the environment refused 'boom'")
        if action == "hang":
            time.sleep(60)
        if action == "pause":
            time.sleep(0.3)
        if action in ("now", "pause"):
            return "after", 1.0, True, False, {}
        deadline = time.monotonic() + self.wait
        while not self.gate.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        return "after", float(self.gate.exists()), True, False, {}


@pytest.mark.parametrize("workers", [0, 1])
def test_astep_does_not_block_the_event_loop(tmp_path, workers):
    """The loop issues the step, then opens the gate the step waits for: this only finishes
    with reward 1 when the step runs off the loop's thread (in-process: the engine thread).
    The control steps on the loop's thread and gets 0."""
    gate = tmp_path / "gate"

    class Inline:  # the control: a step that runs on the event loop's thread
        env = _Gated(str(gate), wait=0.5)

        async def areset(self, k):
            return self.env.reset()

        async def astep(self, k, action):
            return self.env.step(action)

    async def main(pool):
        await pool.areset(0)
        step = asyncio.ensure_future(pool.astep(0, "go"))
        await asyncio.sleep(0.05)
        gate.touch()
        return await step

    with EnvPool(functools.partial(_Gated, str(gate)), n=1, workers=workers) as pool:
        assert asyncio.run(main(pool))[1] == 1.0
    gate.unlink()
    assert asyncio.run(main(Inline()))[1] == 0.0


@pytest.mark.parametrize("workers", [0, 1])
def test_a_batch_of_replies_resumes_its_episodes_a_slice_at_a_time(tmp_path, workers):
    """32 steps queued while a "pause" step holds the one host travel in one batch and come
    back together; a probe coroutine that yields every turn of the loop runs between every
    :data:`_RESUME_SLICE` resumed episodes, not once after all 32 (what resuming every reply
    at once, ``asyncio.wrap_future``, does)."""
    from agent_envs.pool import _RESUME_SLICE

    order: list[str] = []

    async def episode(pool, k):
        await pool.astep(k, "now")
        order.append("e")

    async def probe(done):
        while not done.is_set():
            order.append("p")
            await asyncio.sleep(0)

    async def main(pool):
        await asyncio.gather(*(pool.areset(k) for k in range(33)))
        hold = asyncio.ensure_future(pool.astep(0, "pause"))
        await asyncio.sleep(0.05)
        done = asyncio.Event()
        probing = asyncio.ensure_future(probe(done))
        await asyncio.gather(*(episode(pool, k) for k in range(1, 33)))
        done.set()
        await asyncio.gather(hold, probing)

    with EnvPool(functools.partial(_Gated, str(tmp_path / "gate")), n=33, workers=workers) as pool:
        asyncio.run(main(pool))
    runs = [len(run) for run in "".join(order).split("p") if run]
    assert sum(runs) == 32 and max(runs) <= _RESUME_SLICE, runs


class _Counter(CountTo):
    goal, actions = 4, ["up", "stay"]


def test_arun_lets_episodes_overtake_a_slow_one():
    """Slot 0's policy answers only once every sibling has finished: in lock step that can
    never happen; with ``arun`` the siblings run ahead and slot 0 finishes last."""
    finished: list[int] = []
    others_done = asyncio.Event()

    async def policy(turn: Turn) -> str:
        if turn.slot == 0 and turn.t == 0:
            await asyncio.wait_for(others_done.wait(), timeout=30)
        return "up"

    def on_step(turn, step, info):
        if info.get("won"):
            finished.append(turn.slot)
            if len(finished) == 3:
                others_done.set()

    with GroupRunner(_Counter, workers=0, max_steps=10) as runner:
        groups = asyncio.run(runner.arun([0], policy, group_size=4, on_step=on_step))
    assert finished == [1, 2, 3, 0]
    assert [t.success for t in groups[0]] == [True] * 4 and [len(t) for t in groups[0]] == [4] * 4


class _Made(_Counter):
    """Counts the environments made (in-process: the test reads the class attribute)."""

    made = 0

    def __init__(self) -> None:
        type(self).made += 1


def _up_or_stay(turn: Turn) -> str:
    return "stay" if (turn.group + turn.slot + turn.t) % 3 == 0 else "up"


@pytest.mark.parametrize("groups_in_flight", [2, None])
def test_arun_admits_groups_in_flight_and_reuses_their_environments(groups_in_flight):
    """Five groups of two.  With ``groups_in_flight=2`` no more than two groups are ever between
    their first turn and their end, the third group's first turn comes after ``on_group``
    reported an ended one, and four environments serve all ten episodes; without the limit
    (the control) the groups play at once on ten environments.  Either way the
    trajectories equal the lock-step loop's and ``on_group`` reports each group once, with its
    own trajectories."""
    tasks = [0, 2, 1, 3, 0]
    with GroupRunner(_Counter, workers=0, max_steps=12) as runner:
        expected = runner.run(tasks, lambda turns: [_up_or_stay(t) for t in turns], group_size=2)
    events: list[tuple[str, int]] = []
    reported: dict[int, list] = {}

    async def policy(turn: Turn) -> str:
        if ("turn", turn.group) not in events:
            events.append(("turn", turn.group))
        await asyncio.sleep(random.random() / 1000)
        return _up_or_stay(turn)

    def on_group(g, trajectories):
        events.append(("end", g))
        reported[g] = trajectories

    _Made.made = 0
    with GroupRunner(_Made, workers=0, max_steps=12) as runner:
        got = asyncio.run(runner.arun(tasks, policy, group_size=2, groups_in_flight=groups_in_flight,
                                      on_group=on_group))
    live, most = set(), 0
    for kind, g in events:
        live.add(g) if kind == "turn" else live.discard(g)
        most = max(most, len(live))
    assert got == expected and reported == dict(enumerate(expected))
    if groups_in_flight == 2:
        assert (most, _Made.made) == (2, 4)
        third = [g for kind, g in events if kind == "turn"][2]
        assert events.index(("turn", third)) > min(i for i, (kind, _g) in enumerate(events) if kind == "end")
    else:  # all five start at once (the first ends long after the last starts; > 2 suffices here)
        assert most > 2 and _Made.made == 10


def test_worker_nice_lowers_only_the_workers_priority():
    """``worker_nice=7``: each worker runs 7 nicer than this process, which keeps its own
    priority; the default leaves the workers at this process's; in-process it is refused (it
    would change the caller's priority)."""
    import os

    own = os.getpriority(os.PRIO_PROCESS, 0)
    for nice, expected in ((7, min(own + 7, 19)), (0, own)):
        with EnvPool("CartPole-v1", workers=2, worker_nice=nice) as pool:
            pool.reset([(0, 1, None), (1, 1, None)])  # both workers are past their start
            assert [os.getpriority(os.PRIO_PROCESS, proc.pid) for proc in pool.procs] == [expected] * 2
    assert os.getpriority(os.PRIO_PROCESS, 0) == own
    with pytest.raises(ValueError, match="applies to worker processes"):
        EnvPool("CartPole-v1", worker_nice=3)
    with pytest.raises(ValueError, match="0..19"):
        EnvPool("CartPole-v1", workers=1, worker_nice=20)


def _alfworld_kwargs():
    return {"split": "generated", "generated_n": 2, "generated_seed": 3}  # the embedded default: no download


def _seeded_choice(turn: Turn) -> str:
    actions = list(turn.info["admissible_actions"])
    return random.Random(1000 * turn.group + 100 * turn.slot + turn.t).choice(actions)


@pytest.mark.parametrize("workers", [0, 2])
def test_arun_plays_the_same_episodes_as_run(workers):
    """ALFWorld-generated, 2 tasks x 3 siblings, a policy that depends only on (group, slot,
    t): the asynchronous loop (in-process and over 2 workers) equals the lock-step one."""
    kwargs = _alfworld_kwargs()

    async def policy(turn):
        await asyncio.sleep(random.random() / 1000)  # answers arrive out of order
        return _seeded_choice(turn)

    with GroupRunner("ALFWorld-Rubric-v0", kwargs, max_steps=8) as runner:
        expected = runner.run([0, 1], lambda turns: [_seeded_choice(t) for t in turns], group_size=3, seeds=[5, 6])
    with GroupRunner("ALFWorld-Rubric-v0", kwargs, workers=workers, max_steps=8) as runner:
        got = asyncio.run(runner.arun([0, 1], policy, group_size=3, seeds=[5, 6], concurrency=4))
    assert got == expected
    assert len({t.steps[0].observation for t in got[0]}) == 1  # siblings start identically
    assert any(len(t) == 8 and t.truncated for g in got for t in g)


def test_errors_are_per_episode_and_named(tmp_path):
    """A raising step fails its own await (the traceback names the environment's error) and
    leaves the other episodes in the same message alone; in-process the error is the
    environment's own exception."""
    (tmp_path / "gate").touch()
    factory = functools.partial(_Gated, str(tmp_path / "gate"))

    async def main(pool):
        await asyncio.gather(*(pool.areset(k) for k in range(3)))
        return await asyncio.gather(pool.astep(0, "go"), pool.astep(1, "boom"), pool.astep(2, "go"),
                                    return_exceptions=True)

    with EnvPool(factory, n=3, workers=1) as pool:
        ok0, bad, ok2 = asyncio.run(main(pool))
        assert ok0[1] == ok2[1] == 1.0
        assert isinstance(bad, RolloutWorkerError) and "ValueError: the environment refused 'boom'" in str(bad)
        with pytest.raises(RolloutWorkerError, match="refused 'boom'"):  # the batched path too
            pool.step([(0, "boom"), (1, "go")])
    with EnvPool(factory, n=1) as pool:
        asyncio.run(pool.areset(0))
        with pytest.raises(ValueError, match="refused 'boom'"):
            asyncio.run(pool.astep(0, "boom"))


def test_a_worker_that_never_answers_times_out_and_close_kills_it(tmp_path):
    (tmp_path / "gate").touch()
    pool = EnvPool(functools.partial(_Gated, str(tmp_path / "gate")), n=2, workers=1, timeout=1.0)
    try:
        pool.reset([(0, None, None)])
        pid = pool.procs[0].pid
        with pytest.raises(RolloutWorkerError, match=rf"rollout worker 0 \(pid {pid}\) did not reply within 1 s"):
            pool.step([(0, "hang")])
        with pytest.raises(RolloutWorkerError, match="did not reply"):  # lost for good: later calls say so
            asyncio.run(pool.astep(1, "go"))
    finally:
        pool.close()
    assert pool.hosts == [] and _zombie_or_gone(pid)  # close killed the busy worker


def _zombie_or_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_bad_pool_arguments_are_named():
    with pytest.raises(ValueError, match="backend must be one of process, ray"):
        EnvPool("CartPole-v1", backend="threads")
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        EnvPool("CartPole-v1", timeout=0)
    with pytest.raises(ValueError, match="concurrency"), GroupRunner(_Counter) as runner:
        asyncio.run(runner.arun([0], None, group_size=1, concurrency=0))
    with pytest.raises(ValueError, match="groups_in_flight"), GroupRunner(_Counter) as runner:
        asyncio.run(runner.arun([0], None, group_size=1, groups_in_flight=True))
    with EnvPool("CartPole-v1", n=1) as pool, pytest.raises(IndexError, match="out of range 0..0"):
        asyncio.run(pool.astep(3, 0))


class _Tally(gym.Env):
    """Counts its steps: the observation is how many ``step`` calls it has run since reset."""

    observation_space = gym.spaces.Discrete(1000)
    action_space = gym.spaces.Text(16)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return 0, {}

    def step(self, action):
        if action == "pause":
            time.sleep(0.3)
        self.steps += 1
        return self.steps, 0.0, False, False, {}


def test_a_cancelled_step_that_has_not_left_never_runs():
    """Environment 1's step waits behind environment 0's slow one (one worker, one message in
    flight); cancelled meanwhile, it is never sent: environment 1 has run 0 steps, and the
    next step is its first."""

    async def main(pool):
        await asyncio.gather(pool.areset(0), pool.areset(1))
        slow = asyncio.ensure_future(pool.astep(0, "pause"))
        await asyncio.sleep(0.05)  # the slow step is in flight
        queued = asyncio.ensure_future(pool.astep(1, "go"))
        await asyncio.sleep(0)
        queued.cancel()
        await slow
        return queued.cancelled(), (await pool.astep(1, "go"))[0]

    with EnvPool(_Tally, n=2, workers=1) as pool:
        assert asyncio.run(main(pool)) == (True, 1)


def test_an_event_loop_that_ends_mid_step_leaves_the_pool_usable():
    """A loop that ends with a step in flight (``asyncio.run`` cancels the episode) leaves its
    reply behind; the next synchronous call and the next loop drop it and get their own
    replies.  A synchronous call while a running loop has steps in flight is refused, named."""

    async def abandon(pool):
        asyncio.ensure_future(pool.astep(0, "pause"))
        await asyncio.sleep(0.05)  # sent; the loop ends before the reply

    async def mixed(pool):
        step = asyncio.ensure_future(pool.astep(0, "go"))
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # flushed: in flight
        with pytest.raises(RuntimeError, match=r"rollout worker 0 has steps in flight .* step it synchronously"):
            pool.step([(0, "go")])
        return (await step)[0]

    with EnvPool(_Tally, n=1, workers=1) as pool:
        pool.reset([(0, None, None)])
        asyncio.run(abandon(pool))
        assert pool.step([(0, "go")])[0][0] == 2  # the abandoned step ran: this is the second
        asyncio.run(abandon(pool))
        assert asyncio.run(pool.astep(0, "go"))[0] == 4
        assert asyncio.run(mixed(pool)) == 5


@pytest.mark.parametrize("how", ["killed", "stopped", "timeout"])
def test_a_lost_worker_fails_the_awaiting_steps_with_its_name(tmp_path, how):
    """Awaited steps learn of a worker killed (SIGKILL) or stopped (SIGSTOP) while they are in
    flight, or of one past the pool's ``timeout``, from the event loop itself (its reader and
    watchdog); every step in flight or queued on that worker fails, naming it, and later ones too."""
    import os
    import signal

    (tmp_path / "gate").touch()
    pool = EnvPool(functools.partial(_Gated, str(tmp_path / "gate")), n=2, workers=1,
                   timeout=60.0 if how == "timeout" else None)

    async def main():
        await asyncio.gather(pool.areset(0), pool.areset(1))
        if how == "timeout":  # the worker has started (its spawn may take seconds on a busy machine)
            pool.hosts[0].timeout = 1.0
        pid = pool.procs[0].pid
        steps = [asyncio.ensure_future(pool.astep(0, "hang")), asyncio.ensure_future(pool.astep(1, "go"))]
        await asyncio.sleep(0.2)
        if how != "timeout":
            os.kill(pid, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
        out = await asyncio.wait_for(asyncio.gather(*steps, return_exceptions=True), timeout=30)
        with pytest.raises(RolloutWorkerError):
            await pool.astep(1, "go")
        return pid, out

    try:
        pid, out = asyncio.run(main())
    finally:
        pool.close()
    why = {"killed": "died: it was killed by signal 9", "stopped": r"is stopped \(by SIGSTOP or SIGTSTP\)",
           "timeout": "did not reply within 1 s"}[how]
    assert all(isinstance(e, RolloutWorkerError) and re.search(rf"rollout worker 0 \(pid {pid}\) {why}", str(e))
               for e in out), out
    assert _zombie_or_gone(pid)


def test_worker_idle_schedules_only_the_workers_as_idle():
    """``worker_idle=True``: each worker runs under SCHED_IDLE, this process keeps its own policy;
    refused in-process and together with ``worker_nice``."""
    import os

    own = os.sched_getscheduler(0)
    with EnvPool("CartPole-v1", workers=2, worker_idle=True) as pool:
        pool.reset([(0, 1, None), (1, 1, None)])  # both workers are past their start
        assert [os.sched_getscheduler(proc.pid) for proc in pool.procs] == [os.SCHED_IDLE] * 2
    assert os.sched_getscheduler(0) == own
    with pytest.raises(ValueError, match="worker_idle applies to worker processes"):
        EnvPool("CartPole-v1", worker_idle=True)
    with pytest.raises(ValueError, match="not both"):
        EnvPool("CartPole-v1", workers=1, worker_idle=True, worker_nice=5)
