"""The TextWorld grammar memoisation changes speed only: whole episodes are identical."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, random, sys, zlib
import gymnasium as gym, agent_envs
from agent_envs.alfworld import engine, fast_grammar
engine.transition_memo().enabled = False  # every text derived by the (patched or upstream) grammar
env = gym.make("ALFWorld-Rubric-v0", split="generated", max_steps=20, fast_grammar=sys.argv[1] == "1")
assert fast_grammar.enabled() == (sys.argv[1] == "1")
ids = env.unwrapped.task_ids()
rng = random.Random(0)
def canon(keys):  # frozensets print in hash order, which differs between processes
    return json.dumps(keys, sort_keys=True, default=lambda o: sorted(map(str, o)) if isinstance(o, (set, frozenset)) else str(o))
trace = []
for k in (0, 19, 48, 7, 33):
    obs, info = env.reset(seed=0, options={"task": ids[k]})
    trace.append([obs, info["admissible_actions"]])
    while True:
        obs, r, te, tr, info = env.step(rng.choice(info["admissible_actions"]))
        trace.append([obs, r, te, tr, info["admissible_actions"], info["won"], canon(info["keys"])])
        if te or tr:
            break
print(json.dumps({"crc": zlib.crc32(json.dumps(trace).encode()), "steps": len(trace)}))
"""


@pytest.mark.slow
def test_patched_engine_plays_identical_episodes() -> None:
    out = []
    for flag in ("0", "1"):
        res = subprocess.run([sys.executable, "-c", SCRIPT, flag], capture_output=True, text=True, check=False)
        assert res.returncode == 0, f"episode script failed (fast_grammar={flag}):\n{res.stderr[-3000:]}"
        out.append(json.loads(res.stdout.strip().splitlines()[-1]))
    assert out[0]["steps"] > 60
    assert out[0] == out[1]
