"""OpenEnv servers, clients and the pool's remote backend, end to end over loopback.

Run in OpenEnv's own venv (tests/test_serving_openenv.py passes this file to its pytest; the main
environment does not collect it).  Every server is the real command, ``python -m trainers.cli
serve ENV`` (uvicorn, OpenEnv's ``create_app``), and every client OpenEnv's own ``EnvClient``
(:class:`agent_envs.serving.client.RubricEnvClient`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import gymnasium as gym
import pytest

import agent_envs  # noqa: F401  (registers the ids)
from agent_envs.agent.tools import action_to_call
from agent_envs.alfworld.data import task_walkthrough
from agent_envs.pool import EnvPool, RolloutWorkerError
from agent_envs.registration import ENV_IDS
from agent_envs.rollout import GroupRunner, Turn
from agent_envs.serving.client import RemoteRubricEnv, RubricEnvClient, reset_tuple, step_tuple
from agent_envs.serving.models import RubricAction

REPO = Path(__file__).resolve().parents[2]
ALF = "ALFWorld-Rubric-v0"
ALF_KWARGS = {"split": "generated", "generated_n": 2, "generated_seed": 3}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


class Server:
    """``rubricgym serve`` in a subprocess (the real command line)."""

    def __init__(self, env_id: str, kwargs: dict, *, port: int | None = None, extra: tuple = ()) -> None:
        self.env_id, self.kwargs, self.extra = env_id, kwargs, extra
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)  # noqa: SIM115

    def start(self, wait: float = 180.0) -> Server:
        cmd = [sys.executable, "-m", "trainers.cli", "serve", self.env_id, "--port", str(self.port),
               "--env-kwargs", json.dumps(self.kwargs), "--graceful-timeout", "3", *self.extra]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "OMP_NUM_THREADS": "1"})
        deadline = time.monotonic() + wait
        while not _healthy(self.url):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start (exit {self.proc.poll()}):\n{self.output()}")
            time.sleep(0.2)
        return self

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.proc.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.proc.wait(timeout=60)

    def stop(self) -> int:
        """SIGTERM; the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


@contextmanager
def served(env_id: str, kwargs: dict, **kw):
    server = Server(env_id, kwargs, **kw).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def alf_server():
    with served(ALF, ALF_KWARGS) as server:
        yield server
    assert server.proc.returncode == 0, server.output()


@pytest.fixture(scope="module")
def local_alf():
    env = gym.make(ALF, **ALF_KWARGS)
    yield env
    env.close()


def _play_local(env, seed, task, actions):
    """The local environment's (obs, info) after reset and each action's 5-tuple."""
    out = [env.reset(seed=seed, options={"task": task})]
    out += [env.step(a) for a in actions]
    return out


# --- the server and OpenEnv's client ---------------------------------------------------------


def test_schema_health_and_metadata(alf_server):
    with urllib.request.urlopen(f"{alf_server.url}/schema", timeout=10) as r:
        schema = json.load(r)
    assert {"text", "tool", "arguments"} <= set(schema["action"]["properties"])
    assert {"text", "terminated", "truncated", "metadata"} <= set(schema["observation"]["properties"])
    assert {"env_id", "won", "score", "task"} <= set(schema["state"]["properties"])
    with urllib.request.urlopen(f"{alf_server.url}/metadata", timeout=10) as r:
        assert json.load(r)["name"] == ALF


def test_openenv_client_plays_a_won_alfworld_episode_identical_to_the_local_one(alf_server, local_alf):
    """The stored walkthrough of a generated game, replayed through OpenEnv's client: every
    observation, reward and info (rubric channels, keys with their tuples and frozensets,
    admissible actions, won, score) equals the in-process environment's, and the episode is won."""
    with RubricEnvClient(base_url=alf_server.url).sync() as client:
        first = client.reset(seed=0, options={"task": 1})
        obs, info = reset_tuple(first)
        walk = task_walkthrough(info)
        assert len(walk) >= 2, info["task"]
        remote = [(obs, info)] + [step_tuple(client.step(a)) for a in walk]
        state = client.state()
    local = _play_local(local_alf, 0, 1, walk)
    assert remote == local
    last = remote[-1]
    assert last[1] == 10.0 and last[2] and last[4]["won"] and last[4]["score"] == 1.0
    assert isinstance(last[4]["keys"]["signature"][0], frozenset)
    assert first.observation.metadata["won"] is False and isinstance(first.observation.metadata["admissible_actions"], list)
    assert state.won and state.done and state.step_count == len(walk) and state.env_id == ALF
    assert state.task["gamefile"] == info["task"]["gamefile"]


def test_tool_call_actions_step_the_same_action(alf_server):
    with RubricEnvClient(base_url=alf_server.url).sync() as client:
        _, info = reset_tuple(client.reset(seed=0, options={"task": 0}))
        action = task_walkthrough(info)[0]
        name, args = action_to_call(action)
        by_tool = step_tuple(client.step(RubricAction(tool=name, arguments=args)))
        client.reset(seed=0, options={"task": 0})
        by_text = step_tuple(client.step(action))
    assert by_tool == by_text and by_tool[4]["valid"]


def test_malformed_actions_are_invalid_steps_or_refused_and_the_session_goes_on(alf_server):
    with RubricEnvClient(base_url=alf_server.url).sync() as client:
        client.reset(seed=0, options={"task": 0})
        _, reward, terminated, _, info = step_tuple(client.step("x" * 50_000 + " \x00 fly to the moon"))
        assert (reward, terminated, info["valid"], info["penalty"]) == (-0.1, False, False, -0.1)
        bad_call = step_tuple(client.step(RubricAction(tool="go_to", arguments="{not json")))
        assert bad_call[4]["valid"] is False
        for payload in ({}, {"text": "look", "tool": "look"}, {"text": 5}, {"txt": "look"}, {"text": "x" * 100_001}):
            with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
                client.step(payload)
        assert step_tuple(client.step(info["admissible_actions"][0]))[4]["valid"]  # the session goes on
        assert client.state().step_count == 3


def test_concurrent_sessions_are_independent(alf_server, local_alf):
    """Eight WebSocket sessions at once, two tasks, each replaying a different prefix of its
    walkthrough: each ends where the local environment does after the same prefix."""
    with RubricEnvClient(base_url=alf_server.url).sync() as probe:
        walks = {t: task_walkthrough(reset_tuple(probe.reset(seed=0, options={"task": t}))[1]) for t in (0, 1)}

    async def play(i):
        task = i % 2
        actions = walks[task][: 1 + i % len(walks[task])]
        async with RubricEnvClient(base_url=alf_server.url) as client:
            await client.reset(seed=0, options={"task": task})
            last = None
            for a in actions:
                last = step_tuple(await client.step(a))
                await asyncio.sleep(0.001 * (i % 3))
            state = await client.state()
        return task, actions, last, state.step_count

    async def main():
        return await asyncio.gather(*(play(i) for i in range(8)))

    for task, actions, last, steps in asyncio.run(main()):
        assert last == _play_local(local_alf, 0, task, actions)[-1]
        assert steps == len(actions)


def test_a_server_restart_fails_the_call_in_flight_and_the_client_reconnects():
    with served(ALF, ALF_KWARGS) as server:
        client = RubricEnvClient(base_url=server.url).sync()
        _, info = reset_tuple(client.reset(seed=0, options={"task": 0}))
        server.kill()  # SIGKILL: its sessions are gone
        server.start()
        with pytest.raises(Exception) as lost:
            client.step(info["admissible_actions"][0])
        if "ConnectionClosed" in type(lost.value).__name__:  # the close had not been read yet: this call saw it
            with pytest.raises(RuntimeError, match="no episode on this connection: reset first"):
                client.step("look")
        else:  # the client reconnected to a fresh session, which says the episode is gone
            assert isinstance(lost.value, RuntimeError) and "no episode on this connection: reset first" in str(lost.value)
        _, info2 = reset_tuple(client.reset(seed=0, options={"task": 0}))
        assert info2["task"] == info["task"]
        client.close()


def test_capacity_is_refused_and_sigterm_with_an_open_session_exits_0():
    server = Server(ALF, ALF_KWARGS, extra=("--max-sessions", "1")).start()
    first = RubricEnvClient(base_url=server.url).sync()
    first.reset(seed=0, options={"task": 0})
    with RubricEnvClient(base_url=server.url).sync() as second, \
            pytest.raises(RuntimeError, match="CAPACITY_REACHED"):
        second.reset(seed=0, options={"task": 0})
    assert server.stop() == 0, server.output()  # uvicorn's graceful shutdown, then exit 0 (not by the signal)
    first.close()


def test_bad_serve_arguments_exit_with_one_line():
    run = [sys.executable, "-m", "trainers.cli", "serve"]
    done = subprocess.run([*run, "NoSuch-v0"], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 1 and "unknown environment id 'NoSuch-v0'" in done.stderr
    done = subprocess.run([*run, ALF, "--env-kwargs", "[1]"], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 2 and "must be a JSON object" in done.stderr


def test_workers_share_the_port():
    with served(ALF, ALF_KWARGS, extra=("--workers", "2")) as server:
        async def play(i):
            async with RubricEnvClient(base_url=server.url) as client:
                _, info = reset_tuple(await client.reset(seed=0, options={"task": i % 2}))
                return step_tuple(await client.step(info["admissible_actions"][0]))[4]["valid"]

        async def main():
            return await asyncio.gather(*(play(i) for i in range(6)))

        assert all(asyncio.run(main()))
    assert server.proc.returncode == 0, server.output()


@pytest.fixture(scope="module")
def webshop_server():
    from agent_envs.webshop.testing import write_mini_catalogue

    kwargs = {"catalogue": str(write_mini_catalogue(tempfile.mkdtemp())), "verify": False, "tagger": "lexicon",
              "goal_kind": "synthetic"}
    with served("WebShop-Rubric-v0", kwargs) as server:
        yield server


def test_webshop_server_plays_the_oracle_to_a_purchase(webshop_server):
    from agent_envs.webshop.oracle import oracle_action

    local = gym.make("WebShop-Rubric-v0", **webshop_server.kwargs)
    _, info = local.reset(seed=0, options={"task": 0})
    plan, done, expected = [], False, []
    while not done:
        plan.append(oracle_action(local.unwrapped))
        expected.append(local.step(plan[-1]))
        done = expected[-1][2] or expected[-1][3]
    local.close()
    env = RemoteRubricEnv(webshop_server.url)
    assert env.reset(seed=0, options={"task": 0})[1] == info
    got = [env.step(a) for a in plan]
    env.close()
    assert got == expected and got[-1][4]["won"]


@pytest.mark.parametrize("env_id", sorted(ENV_IDS))
def test_every_registered_environment_serves(env_id, request):
    """Each registered id (ALFWorld and WebShop: the servers above; any other with its
    defaults) resets and steps its first admissible action through OpenEnv's client; the info
    carries the contract's fields, and the session's state its episode."""
    from agent_envs.info import CONTRACT_FIELDS

    shared = {ALF: "alf_server", "WebShop-Rubric-v0": "webshop_server"}
    with contextlib.ExitStack() as stack:
        server = request.getfixturevalue(shared[env_id]) if env_id in shared else stack.enter_context(served(env_id, {}))
        client = stack.enter_context(RubricEnvClient(base_url=server.url).sync())
        _, info = reset_tuple(client.reset(seed=0))
        assert set(CONTRACT_FIELDS) <= set(info)
        _, _, _, _, info = step_tuple(client.step(info["admissible_actions"][0]))
        assert info["valid"] and set(CONTRACT_FIELDS) <= set(info)
        state = client.state()
        assert (state.env_id, state.step_count) == (env_id, 1)


def test_trl_environment_factory_plays_on_the_server(alf_server):
    """TRL's ``environment_factory`` contract (rubricgym's RubricEnvironments, tools as methods)
    with the environments on the server: the walkthrough as tool calls wins, get_reward is 10."""
    from wrappers.integrations.trl_env import ALFWorldTools, RubricEnvironments

    factory = RubricEnvironments(lambda: RemoteRubricEnv(alf_server.url), tools=ALFWorldTools)
    env = factory()
    prompt = env.reset(task=1, seed=0)
    assert "Possible actions" in prompt
    with RubricEnvClient(base_url=alf_server.url).sync() as probe:
        walk = task_walkthrough(reset_tuple(probe.reset(seed=0, options={"task": 1}))[1])
    for action in walk:
        name, args = action_to_call(action)
        message = getattr(env, name)(**args)
    assert "task completed" in message
    assert env.get_reward() == 10.0
    (traj,) = factory.pop_trajectories()
    assert traj.success and len(traj.steps) == len(walk)
    factory.close()


# --- the pool's remote backend ----------------------------------------------------------------


@pytest.fixture(scope="module")
def two_servers(alf_server):
    with served(ALF, ALF_KWARGS) as other:
        yield [alf_server.url, other.url]


def _seeded_choice(turn: Turn) -> str:
    import random

    actions = list(turn.info["admissible_actions"])
    return random.Random(1000 * turn.group + 100 * turn.slot + turn.t).choice(actions)


def test_group_runner_arun_on_two_servers_equals_the_local_run(two_servers):
    """ALFWorld-generated, 2 tasks x 3 siblings over two servers: the same trajectories as the
    in-process lock-step run (the test_env_pool case, with backend='remote')."""
    with GroupRunner(ALF, ALF_KWARGS, max_steps=8) as runner:
        expected = runner.run([0, 1], lambda turns: [_seeded_choice(t) for t in turns], group_size=3, seeds=[5, 6])

    async def policy(turn):
        await asyncio.sleep(0)
        return _seeded_choice(turn)

    with EnvPool(ALF, backend="remote", urls=two_servers) as pool, GroupRunner(pool, max_steps=8) as runner:
        got = asyncio.run(runner.arun([0, 1], policy, group_size=3, seeds=[5, 6], concurrency=4))
        again = runner.run([0, 1], lambda turns: [_seeded_choice(t) for t in turns], group_size=3, seeds=[5, 6])
        assert pool.workers == 2
    assert got == expected and again == expected


def test_episode_pool_of_the_rl_adapters_plays_on_the_servers(two_servers):
    """The episode pool verl's agent loop and OpenRLHF's agent draw from, with env_backend='remote'."""
    from wrappers.integrations.episode import EpisodePool

    pool = EpisodePool(ALF, ALF_KWARGS, backend="remote", pool_options={"urls": two_servers})
    try:
        episode = pool.acquire()

        async def main():
            await episode.areset(task=0, seed=0)
            walk = task_walkthrough(episode.info)
            for a in walk:
                await episode.astep(f"<action>{a}</action>")
            return episode.success

        assert asyncio.run(main())
    finally:
        pool.close()


def test_an_environment_error_fails_its_request_only(two_servers):
    with EnvPool(ALF, backend="remote", urls=two_servers) as pool:
        with pytest.raises(RolloutWorkerError, match=r"environment 0 on remote env server 0 \(http://.*\): RuntimeError: .*unknown ALFWorld task 'no/such/task'"):
            pool.reset([(0, 0, {"task": "no/such/task"}), (1, 0, {"task": 0})])
        _, info = pool.reset([(0, 0, {"task": 0})])[0]
        assert info["admissible_actions"]


def test_a_killed_server_fails_its_episodes_naming_it_and_the_other_goes_on(alf_server):
    """Four episodes over two servers; server 1 is killed after every episode's second step:
    the episodes on server 0 are won, those on server 1 fail with RolloutWorkerError naming
    it, and so does any later call there."""
    with served(ALF, ALF_KWARGS) as s1:
        pool = EnvPool(ALF, backend="remote", urls=[alf_server.url, s1.url])
        two_steps = asyncio.Event()
        stepped: set[int] = set()

        async def episode(k):
            _, info = await pool.areset(k, 0, {"task": k // 2})
            walk = task_walkthrough(info)
            for t, a in enumerate(walk):
                if t == 2:
                    stepped.add(k)
                    if len(stepped) == 4:
                        two_steps.set()
                    await two_steps.wait()
                    await asyncio.sleep(0.3)
                result = await pool.astep(k, a)
            return result[4]["won"]

        async def main():
            runs = [asyncio.ensure_future(episode(k)) for k in range(4)]
            await two_steps.wait()
            s1.kill()
            out = await asyncio.wait_for(asyncio.gather(*runs, return_exceptions=True), timeout=120)
            with pytest.raises(RolloutWorkerError, match="remote env server 1"):
                await pool.astep(1, "look")
            return out

        try:
            out = asyncio.run(main())
            assert out[0] is True and out[2] is True, out
            for lost in (out[1], out[3]):
                assert isinstance(lost, RolloutWorkerError), out
                assert f"remote env server 1 ({s1.url}) closed the session" in str(lost)
            with pytest.raises(RolloutWorkerError, match=r"remote env server 1 .*close this pool"):
                pool.step([(0, "look"), (3, "look")])  # the batched path names the lost server too
            assert pool.reset([(2, 0, {"task": 1})])[0][1]["admissible_actions"]  # server 0 still plays
        finally:
            pool.close()


def test_group_runner_arun_fails_naming_a_killed_server(alf_server):
    with served(ALF, ALF_KWARGS) as s1:
        killed = []

        async def policy(turn):
            if turn.t == 1 and not killed:
                killed.append(True)
                s1.kill()
            await asyncio.sleep(0.05)
            return _seeded_choice(turn)

        with EnvPool(ALF, backend="remote", urls=[alf_server.url, s1.url]) as pool, \
                GroupRunner(pool, max_steps=6) as runner, \
                pytest.raises(RolloutWorkerError, match=rf"remote env server 1 \({s1.url}\)"):
            asyncio.run(runner.arun([0], policy, group_size=4, seeds=[0]))


def test_a_stopped_server_times_out_and_an_absent_one_cannot_be_reached():
    with served(ALF, ALF_KWARGS) as server, EnvPool(ALF, backend="remote", urls=[server.url], timeout=20.0) as pool:
        pool.reset([(0, 0, {"task": 0})])  # the server's first environment: well within 20 s on a busy machine
        server.kill(signal.SIGSTOP)
        try:
            with pytest.raises(RolloutWorkerError, match=r"remote env server 0 .* did not reply within 20 s"):
                pool.step([(0, "look")])
            with pytest.raises(RolloutWorkerError, match="did not reply within 20 s"):  # lost for good
                asyncio.run(pool.areset(1, 0, {"task": 0}))
        finally:
            server.kill(signal.SIGCONT)
    url = f"http://127.0.0.1:{free_port()}"
    with EnvPool(ALF, backend="remote", urls=[url]) as pool, \
            pytest.raises(RolloutWorkerError, match=rf"remote env server 0 \({url}\) cannot be reached"):
        pool.reset([(0, 0, None)])
