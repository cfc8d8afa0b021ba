# The steps of docs/howto/environment.md ("Writing an environment"), done with a toy: if this
# test fails, the how-to no longer works as written.
"""A new environment is one package that declares a ``Family``, registered by one entry.

The toy, ``Corridor-Rubric-v0``: walk ``forward`` along a corridor of 2 + (task mod 3) cells and
``open door`` at its end (+10). Its rubric: ``at_door`` (A) enables ``solved`` (S). The test
plays the page's module in a fresh interpreter (so the registries of this process stay as they
are): registration, ``check_rubric_env``, an eval panel with the expert (every task won, in
length + 1 steps) and with the random agent, and the arena's and the eval's lists naming it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The module a reader writes (agent_envs/corridor/family.py and env.py in the project; one file
#: here).
MODULE = textwrap.dedent('''
    """Corridor-Rubric-v0: walk to the door, open it."""

    import string

    import gymnasium as gym
    from gymnasium import spaces

    from agent_envs.family import ArenaPreset, Family
    from agent_envs.info import rubric_info
    from agent_envs.panels import PanelSpec
    from rubrics import SignatureTracker, load_template
    from rubrics.channels import Channel

    ENV_ID = "Corridor-Rubric-v0"
    CHANNELS = (
        Channel("at_door", "A", "bool", False, "the agent stands at the door"),
        Channel("solved", "S", "bool", False, "the door is open"),
        Channel("invalid_actions", "X", "count", True, "invalid actions so far"),
    )
    TEMPLATES = {"corridor": {"env": "corridor", "family": "corridor", "description": "reach the door, open it",
                              "edges": [{"relation": "requires_current", "from": "at_door", "to": "solved"}]}}


    class CorridorEnv(gym.Env):
        """A corridor of 2 + (task mod 3) cells with a door at its end."""

        observation_space = spaces.Text(max_length=200, charset=string.printable)

        def __init__(self, max_steps=10):
            self.max_steps = max_steps
            self.action_space = spaces.Text(max_length=9, charset=string.ascii_lowercase + " ")
            self._tracker = SignatureTracker(load_template("corridor", "corridor"))

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            index = int((options or {}).get("task", 0))
            self._task = {"id": f"corridor/{index}", "goal": "open the door", "type": "corridor",
                          "length": 2 + index % 3}
            self._pos, self._steps, self._invalid, self._open = 0, 0, 0, False
            self._tracker.reset()
            return self._obs(), self._info(True, 0.0, 0.0)

        def step(self, action):
            if not isinstance(action, str):
                raise TypeError(f"actions are strings, got {type(action).__name__}")
            self._steps += 1
            valid, reward = action in self._actions(), 0.0
            if not valid:
                self._invalid += 1
            elif action == "open door":
                self._open, reward = True, 10.0
            else:
                self._pos += 1 if action == "forward" else -1
            self._tracker.update(self._rubric())
            penalty = 0.0 if valid else -0.1
            truncated = not self._open and self._steps >= self.max_steps
            return self._obs(), reward + penalty, self._open, truncated, self._info(valid, reward, penalty)

        def _actions(self):
            if self._open or self._steps >= self.max_steps:
                return []
            at_door = self._pos == self._task["length"]
            return (["back"] if self._pos > 0 else []) + (["open door"] if at_door else ["forward"])

        def _rubric(self):
            return {"at_door": self._pos == self._task["length"], "solved": self._open,
                    "invalid_actions": self._invalid}

        def _obs(self):
            return f"You are {self._task['length'] - self._pos} steps from the door."

        def _info(self, valid, task_reward, penalty):
            rubric, sig = self._rubric(), self._tracker.signature()
            return rubric_info(
                admissible_actions=self._actions(), task=self._task, rubric=rubric,
                keys={"exact": self._pos, "coarse": rubric["at_door"], "signature": sig.key()},
                state_key=f"cell {self._pos}", won=self._open, score=float(self._open),
                valid=valid, task_reward=task_reward, penalty=penalty)


    def expert(info):
        """The shortest plan for the task of an episode's first info."""
        task = info.get("task") or {}
        if not str(task.get("id", "")).startswith("corridor/"):
            return []
        return ["forward"] * task["length"] + ["open door"]


    def panel_tasks(env, spec):
        """The panel's tasks, their ids, each task's content bytes and extra hash bytes."""
        tasks = list(range(spec.limit))
        return tasks, [f"corridor/{i}" for i in tasks], [str(2 + i % 3).encode() for i in tasks], b""


    FAMILY = Family(
        name="corridor",
        envs={ENV_ID: f"{__name__}:CorridorEnv"},
        channels=CHANNELS,
        templates=TEMPLATES,
        keys={"exact": "the cell", "coarse": "at the door or not"},
        tool_kinds=(("forward", "forward", "Walk forward."), ("back", "back", "Walk back."),
                    ("open", "open door", "Open the door.")),
        panels=(PanelSpec("corridor-v1", ENV_ID, {}, {}, "six corridors", limit=6),),
        panel_tasks=f"{__name__}:panel_tasks",
        expert=f"{__name__}:expert",
        arena={"corridor": ArenaPreset(ENV_ID, "corridor", max_steps=10, seeds=3)},
        estimators={"graphgpo": {"gamma": 0.8}, "mcgpo": {"gamma": 0.8}},
    )
''')

#: What the test runs in a fresh interpreter, with the module importable as ``corridor_env``.
SCRIPT = textwrap.dedent('''
    import json, sys
    import gymnasium as gym
    import agent_envs
    from agent_envs import check_rubric_env
    from agent_envs.family import register_family
    import corridor_env

    register_family(corridor_env.FAMILY)                        # what the entry point does
    env = gym.make("Corridor-Rubric-v0")
    check_rubric_env(env, options={"task": 2})
    env.close()

    from typer.testing import CliRunner
    from trainers.cli import app

    out = {}
    for agent in ("walkthrough", "random"):
        res = CliRunner().invoke(app, ["eval", "corridor-v1", "--model", agent, "--workers", "0",
                                       "-o", f"{sys.argv[1]}/{agent}"], env={"COLUMNS": "250"})
        assert res.exit_code == 0, res.output
        out[agent] = res.output
    out["eval_list"] = CliRunner().invoke(app, ["eval", "--list"]).output
    out["arena_list"] = CliRunner().invoke(app, ["arena", "--list"], env={"COLUMNS": "250"}).output
    print(json.dumps(out))
''')


@pytest.fixture
def played(tmp_path) -> dict:
    (tmp_path / "corridor_env.py").write_text(MODULE, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]), COLUMNS="250")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "eval")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_toy_environment_goes_everywhere_through_its_family(played, tmp_path) -> None:
    walk, rand = (json.loads((tmp_path / "eval" / agent / "results.json").read_text(encoding="utf-8"))
                  for agent in ("walkthrough", "random"))
    # the expert walks length = 2, 3, 4, 2, 3, 4 cells and opens the door: 6 of 6 won,
    # mean steps (3 + 4 + 5 + 3 + 4 + 5) / 6 = 4, never an invalid action, every rubric channel reached
    assert (walk["panel"], walk["episodes"], walk["success"]) == ("corridor-v1", 6, 1.0)
    assert walk["mean_steps"] == pytest.approx(4.0) and walk["invalid_rate"] == 0.0
    assert walk["rubric/at_door"] == 1.0 and walk["rubric/solved"] == 1.0
    # the random agent plays the same panel (the same hash, printed by both runs)
    assert rand["episodes"] == 6 and rand["hash"] == walk["hash"]
    assert walk["hash"][:12] in played["walkthrough"] and walk["hash"][:12] in played["random"]
    assert "corridor-v1" in played["eval_list"]
    environments = played["arena_list"].splitlines()[0]
    assert environments.startswith("environments: ") and "corridor" in environments.split(": ")[1].split(", ")
