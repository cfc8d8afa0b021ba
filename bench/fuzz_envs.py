"""Random actions fired at each environment: counts of steps, crashes, hangs and observations
outside the observation space.

Envs (``--envs``): ``webshop`` = ``WebShop-Rubric-v0`` embedded on the generated 1000-product
catalogue (tagger ``auto``), and ``alfworld`` = ``ALFWorld-Rubric-v0`` on the generated split
(60 games; generated on first use and cached).  Both are made with ``gym.make`` (Gymnasium's
checkers on).  Every episode starts from ``reset(seed=s, options={"task": t})`` with a random
task; every step fires one action drawn from

* ``admissible`` - one of ``info["admissible_actions"]`` (WebShop's ``<your query>`` filled
  with random words),
* ``mutated``    - an admissible action mangled (case, spaces, truncation, a character
  dropped/duplicated/replaced, brackets removed, junk appended),
* ``space``      - ``env.action_space.sample()`` (random text in the env's charset),
* ``hostile``    - fixed nasty strings: empty, NUL and control bytes, 100 000 characters,
  emoji, unbalanced brackets, format strings, huge search queries, other envs' actions,

until the episode terminates or truncates.  Counted per env: a **crash** is any exception
from ``step``/``reset`` on a ``str`` action, a **hang** a call slower than ``--hang-s``,
**outside** an observation that ``observation_space.contains`` refuses (or a reward/info
that breaks the documented contract).  Exit status 1 when any is non-zero.

Usage::

    python bench/fuzz_envs.py                          # 7000 actions per env, seed 0
    python bench/fuzz_envs.py --envs webshop --actions 20000 --seed 3
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HOSTILE = ["", " ", "\x00", "\n\t\r", "\x1b[31mlook\x1b[0m", "a" * 100_000, "é" * 300, "🙂 take apple 🙂",
           "click[", "click[]", "click[[[", "search[", "search[]", "search[" + "shoe " * 2000 + "]",
           "click[buy now]", "click[back to search]", "click[< prev]", "click[next >]", "click[b000000001]",
           "search[%s%d{}]", "}{%s%d", "go to", "take  from ", "help", "look", "inventory",
           "go to desk 1\x00", "put apple 1 in/on fridge 1", "click[" + "x" * 5000 + "]",
           "search[\u202e\u200b\ufeff]", "plane 16 \U0010ffff", "CLICK[BUY NOW]"]
WORDS = ["shoes", "red", "candle", "women", "large", "pack", "under", "dollars", "gluten", "free", "x"]
KINDS = ("admissible", "mutated", "space", "hostile")
WEIGHTS = (0.55, 0.2, 0.15, 0.1)


@dataclass
class Tally:
    env: str
    episodes: int = 0
    steps: int = 0
    kinds: Counter = field(default_factory=Counter)
    valid: int = 0
    terminated: int = 0
    truncated: int = 0
    crashes: list[str] = field(default_factory=list)
    hangs: int = 0
    outside: list[str] = field(default_factory=list)
    slowest_ms: float = 0.0
    wall: float = 0.0


def mutate(action: str, rng: random.Random) -> str:
    """``action`` mangled one of several ways."""
    i = rng.randrange(max(1, len(action)))
    ops = [action.upper(), action.title(), f"  {action}  ", action.replace(" ", "   "), action[: i],
           action[:i] + action[i + 1:], action[:i] + action[i: i + 1] * 2 + action[i + 1:],
           action[:i] + chr(rng.randrange(32, 0x2FF)) + action[i + 1:], action.replace("[", "").replace("]", ""),
           action + rng.choice([" now", "]", "[", "\x00", " please", "." * 50])]
    return rng.choice(ops)


def pick_action(kind: str, env, info: dict, rng: random.Random) -> str:
    acts = info.get("admissible_actions") or ["look"]
    if kind == "admissible":
        a = rng.choice(acts)
        return a.replace("<your query>", " ".join(rng.sample(WORDS, rng.randint(1, 4))))
    if kind == "mutated":
        return mutate(rng.choice(acts).replace("<your query>", rng.choice(WORDS)), rng)
    if kind == "space":
        return env.action_space.sample()
    return rng.choice(HOSTILE)


def check(env, obs, reward, info: dict, rewards: tuple[float, ...], where: str, t: Tally) -> None:
    """Observation in its space, reward in the documented set, info carrying its keys."""
    if not env.observation_space.contains(obs):
        t.outside.append(f"{where}: observation not in observation_space ({type(obs).__name__}, len "
                         f"{len(obs) if isinstance(obs, str) else '-'})")
    if reward is not None and reward not in rewards:
        t.outside.append(f"{where}: reward {reward!r} not in {rewards}")
    if not isinstance(info.get("admissible_actions"), list):
        t.outside.append(f"{where}: info['admissible_actions'] missing")


def make(name: str):
    import gymnasium as gym

    import agent_envs  # noqa: F401  (registers the envs)

    if name == "webshop":
        env = gym.make("WebShop-Rubric-v0", catalogue="generated", num_products=1000, tagger="auto")
        return env, len(env.unwrapped.goals()), (0.0, 10.0, -0.1)
    if name == "alfworld":
        env = gym.make("ALFWorld-Rubric-v0", split="generated")
        return env, len(env.unwrapped.task_ids()), (0.0, 10.0, -0.1)
    raise SystemExit(f"unknown env {name!r} (webshop, alfworld)")


def timed(fn, t: Tally, hang_s: float):
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    t.slowest_ms = max(t.slowest_ms, 1e3 * dt)
    t.hangs += dt > hang_s
    return out


def fuzz(name: str, n_actions: int, seed: int, hang_s: float) -> Tally:
    """Fire ``n_actions`` random actions at env ``name``; returns the counts."""
    t = Tally(name)
    rng = random.Random(seed)
    env, n_tasks, rewards = make(name)
    env.action_space.seed(seed)
    t0 = time.perf_counter()
    while t.steps < n_actions:
        ep_seed = rng.randrange(2**31)
        try:
            opts = {"task": rng.randrange(n_tasks)}
            obs, info = timed(lambda s=ep_seed, o=opts: env.reset(seed=s, options=o), t, hang_s)
        except Exception:  # noqa: BLE001 - counting crashes is the point
            t.crashes.append(f"reset(seed={ep_seed}, options={opts}): {traceback.format_exc(limit=3)}")
            break
        t.episodes += 1
        check(env, obs, None, info, rewards, f"reset {ep_seed}", t)
        done = False
        while not done and t.steps < n_actions:
            kind = rng.choices(KINDS, WEIGHTS)[0]
            action = pick_action(kind, env.unwrapped, info, rng)
            t.kinds[kind] += 1
            t.steps += 1
            try:
                obs, r, term, trunc, info = timed(lambda a=action: env.step(a), t, hang_s)
            except Exception:  # noqa: BLE001
                t.crashes.append(f"step({action[:80]!r}) [{kind}]: {traceback.format_exc(limit=3)}")
                break
            check(env, obs, r, info, rewards, f"step {t.steps} {kind} {action[:40]!r}", t)
            t.valid += bool(info.get("valid"))
            t.terminated += bool(term)
            t.truncated += bool(trunc)
            done = term or trunc
    t.wall = time.perf_counter() - t0
    env.close()
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--envs", default="webshop,alfworld", help="comma-separated: webshop, alfworld")
    ap.add_argument("--actions", type=int, default=7000, help="random actions per env (default 7000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hang-s", type=float, default=30.0, help="a call slower than this is a hang (30)")
    args = ap.parse_args()
    if not 1 <= args.actions <= 10**6:
        raise SystemExit("--actions must be 1..1000000")
    rows = [fuzz(name.strip(), args.actions, args.seed, args.hang_s) for name in args.envs.split(",") if name.strip()]
    head = (f"{'env':<9} {'actions':>7} {'episodes':>8} {'admiss.':>7} {'mutated':>7} {'space':>6} {'hostile':>7} "
            f"{'valid':>6} {'term':>5} {'trunc':>5} {'crashes':>7} {'hangs':>5} {'outside':>7} "
            f"{'max ms':>7} {'wall s':>7}")
    print(f"seed {args.seed}; a hang is a call over {args.hang_s:g} s")
    print(head)
    print("-" * len(head))
    for t in rows:
        k = t.kinds
        print(f"{t.env:<9} {t.steps:>7} {t.episodes:>8} {k['admissible']:>7} {k['mutated']:>7} {k['space']:>6} "
              f"{k['hostile']:>7} {t.valid:>6} {t.terminated:>5} {t.truncated:>5} {len(t.crashes):>7} "
              f"{t.hangs:>5} {len(t.outside):>7} {t.slowest_ms:>7.0f} {t.wall:>7.1f}")
    print(f"total: {sum(t.steps for t in rows)} random actions, {sum(len(t.crashes) for t in rows)} crashes, "
          f"{sum(t.hangs for t in rows)} hangs, {sum(len(t.outside) for t in rows)} observations/rewards "
          "outside their contract")
    for t in rows:
        for msg in t.crashes[:3] + t.outside[:3]:
            print(f"  {t.env}: {msg}")
    if any(t.crashes or t.hangs or t.outside for t in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
