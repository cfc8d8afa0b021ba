"""Environment workers as Ray actors (``EnvPool(backend="ray")``) on a local Ray cluster on CPU."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

ray = pytest.importorskip("ray", reason="pip install 'rubricgym[ray]'")

from agent_envs.pool import EnvPool, RolloutWorkerError
from agent_envs.rollout import GroupRunner

KWARGS = {"split": "generated", "generated_n": 2, "generated_seed": 3}


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_ray_backend_without_a_running_ray_says_so():
    assert not ray.is_initialized()
    with pytest.raises(RuntimeError, match=r"needs a running Ray: call ray.init\(\)"):
        EnvPool("CartPole-v1", workers=1, backend="ray")
    # runs first (file order), before the module's local Ray starts


def _choice(turn):
    return random.Random(1000 * turn.group + 100 * turn.slot + turn.t).choice(list(turn.info["admissible_actions"]))


def test_a_pool_of_ray_actors_plays_what_worker_processes_play(local_ray):
    """The same ALFWorld-generated groups through two Ray actors (lock step and concurrent) as in
    this process; every actor runs in its own process and holds its own environments."""
    with GroupRunner("ALFWorld-Rubric-v0", KWARGS, max_steps=6) as runner:
        expected = runner.run([0, 1], lambda turns: [_choice(t) for t in turns], group_size=2, seeds=[1, 2])

    async def policy(turn):
        return _choice(turn)

    with EnvPool("ALFWorld-Rubric-v0", KWARGS, workers=2, backend="ray", ray_options={"num_cpus": 0.5}) as pool:
        assert pool.procs == [] and len(pool.hosts) == 2
        runner = GroupRunner(pool, max_steps=6)
        assert runner.run([0, 1], lambda turns: [_choice(t) for t in turns], group_size=2, seeds=[1, 2]) == expected
        assert asyncio.run(runner.arun([0, 1], policy, group_size=2, seeds=[1, 2])) == expected
        assert pool.worker_cpu_seconds() > 0


def _kill_and_wait(actor, limit_s=30.0):
    """``ray.kill`` returns before the actor is gone; wait (bounded) until a call on it fails,
    so the pool's next call meets a dead actor rather than racing its death."""
    ray.kill(actor)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.cpu_seconds.remote(), timeout=limit_s)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError(f"the killed actor still answered after {limit_s} s")


def test_a_dead_actor_is_named_and_later_calls_fail_fast(local_ray):
    with EnvPool("CartPole-v1", n=2, workers=2, backend="ray", ray_options={"num_cpus": 0.5}) as pool:
        pool.reset([(0, 1, None), (1, 1, None)])
        _kill_and_wait(pool.hosts[1].actor)
        with pytest.raises(RolloutWorkerError, match="CartPole-v1: Ray env actor 1 failed: .*close this pool"):
            pool.step([(0, 0), (1, 0)])
        with pytest.raises(RolloutWorkerError, match="Ray env actor 1 failed"):
            asyncio.run(pool.astep(1, 0))
        assert pool.step([(0, 0)])[0][1] == 1.0  # actor 0 lives on


