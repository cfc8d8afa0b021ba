"""The environment-family registry: one record per environment, asked by every other module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import agent_envs
from agent_envs.family import ArenaPreset, Family, families, family_of, get_family, register_family
from rubrics.channels import Channel, channel_schema

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _forget_toy_families():
    """Registering is process-wide: take the test's families out of every registry afterwards."""
    import agent_envs.family as registry
    from rubrics import channels, templates

    before = set(registry._FAMILIES)
    yield
    for name in set(registry._FAMILIES) - before:
        fam = registry._FAMILIES.pop(name)
        for env_id in fam.envs:
            registry._BY_ENV.pop(env_id, None)
            agent_envs.ENV_IDS.pop(env_id, None)
            gym.registry.pop(env_id, None)
    for table in (channels._SCHEMAS, templates._GIVEN):
        for name in [n for n in table if n.startswith(("toyfam", "other", "third"))]:
            del table[name]


def _toy(name: str = "toyfam", env_id: str = "ToyFam-Rubric-v0", **over) -> Family:
    fields = dict(
        name=name,
        envs={env_id: "tests.doors_env:DoorsEnv"},
        channels=(Channel("opened", "O", "bool", False, "a door is open"),
                  Channel("solved", "S", "bool", False, "through the last door")),
        templates={"toy": {"env": name, "family": "toy",
                           "edges": [{"relation": "requires_ever", "from": "opened", "to": "solved"}]}},
        tool_kinds=(("open", "open {door}", "Open a door."),),
        arena={f"{name}-arena": ArenaPreset(env_id, name, max_steps=5)},
        estimators={"graphgpo": {"gamma": 0.5}},
    )
    return Family(**(fields | over))


def test_builtin_families_declare_what_the_modules_used_to_branch_on() -> None:
    names = [f.name for f in families()]
    assert names[:2] == ["alfworld", "webshop"]
    alf, web = get_family("alfworld"), get_family("webshop")
    assert family_of("ALFWorld-Rubric-v0") is alf and family_of(gym.make("WebShop-Rubric-v0", num_products=50)) is web
    assert family_of("CartPole-v1") is None
    assert set(agent_envs.ENV_IDS) == {e for f in families() for e in f.envs}
    # the estimator settings the arena used to hard-code (SPEC §4)
    assert alf.estimators["graphgpo"] == {"gamma": 0.1} and web.estimators["graphgpo"] == {"gamma": 0.2}
    assert web.estimators["scpo"] == {"alpha": 1.0, "success_threshold": 9.0}
    assert web.tool_names == ("search", "click") and "go_to" in alf.tool_names
    assert alf.expert and web.oracle and not web.expert
    with pytest.raises(ValueError, match="unknown environment family 'nope'; registered: alfworld, webshop"):
        get_family("nope")


def test_a_registered_family_reaches_gymnasium_rubrics_tools_and_the_arena() -> None:
    from agent_envs.agent.tools import kinds_of, tools_for
    from rubrics import load_template
    from trainers.arena.variants import estimator_defaults

    fam = register_family(_toy())
    assert register_family(_toy()) == fam  # the same record again: a no-op
    assert "ToyFam-Rubric-v0" in gym.registry and "ToyFam-Rubric-v0" in agent_envs.ENV_IDS
    assert list(channel_schema("toyfam")) == ["opened", "solved"]
    assert load_template("toyfam", "toy").vocabulary == ("opened", "solved")
    assert kinds_of("ToyFam-Rubric-v0") == ("open",)
    assert [t["function"]["name"] for t in tools_for(["open door 1", "look"])] == ["open", "look"]
    assert estimator_defaults("graphgpo", "toyfam") == {"gamma": 0.5}
    assert estimator_defaults("grpo", "toyfam") == {}


def test_conflicting_records_are_refused() -> None:
    register_family(_toy())
    with pytest.raises(ValueError, match="already registered with another record"):
        register_family(_toy(estimators={}))
    with pytest.raises(ValueError, match="'ALFWorld-Rubric-v0' is already declared by family 'alfworld'"):
        register_family(_toy("other", "ALFWorld-Rubric-v0"))
    with pytest.raises(ValueError, match="arena preset 'x' of 'third' names 'Nope-v0'"):
        register_family(_toy("third", "Third-v0", arena={"x": ArenaPreset("Nope-v0", "third")}))


def test_no_module_outside_the_families_branches_on_an_environment_name() -> None:
    """The engine-neutral packages ask the registry: no ``startswith("ALFWorld")``-style test
    and no hand-kept table of environment names remains in them."""
    import re

    branch = re.compile(r"""(startswith|==|!=|\bin)\s*\(?\s*["'](alfworld|webshop|ALFWorld|WebShop)""")
    found = []
    for package in ("agent_envs", "trainers", "wrappers", "rubrics"):
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith(("agent_envs/alfworld/", "agent_envs/webshop/")):
                continue
            for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if branch.search(line) and ">>>" not in line:
                    found.append(f"{rel}:{k}: {line.strip()}")
    assert not found, "\n".join(found)


def test_sokoban_is_named_in_at_most_three_package_files_outside_its_folder() -> None:
    """An environment is one folder: outside ``agent_envs/sokoban/`` only its registration entry
    and two examples of a family's estimator settings (docs/sokoban.md lists them) name it."""
    named = sorted(
        path.relative_to(REPO).as_posix()
        for package in ("agent_envs", "trainers", "wrappers", "rubrics")
        for path in (REPO / package).rglob("*.py")
        if not path.relative_to(REPO).as_posix().startswith("agent_envs/sokoban/")
        and "sokoban" in path.read_text(encoding="utf-8").lower()
    )
    assert named == ["agent_envs/family.py", "agent_envs/registration.py", "trainers/config.py"], named


def test_importing_agent_envs_registers_every_family_without_an_engine() -> None:
    code = ("import sys, agent_envs; from agent_envs.family import families; "
            "print(len(families()), ','.join(m for m in ('alfworld', 'textworld', 'flask', 'bm25s') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    n, heavy = out.stdout.strip().split(" ") if " " in out.stdout.strip() else (out.stdout.strip(), "")
    assert int(n) >= 2 and heavy == ""
