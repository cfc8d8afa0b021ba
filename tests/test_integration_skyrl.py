"""skyrl-gym adapter: a rubricgym environment built by skyrl-gym's own ``make`` and played
through its ``BaseTextEnv`` interface; every decision is recorded as a Step."""

from __future__ import annotations

import pytest

skyrl_gym = pytest.importorskip(
    "skyrl_gym", reason="skyrl-gym is not installed: pip install 'skyrl-gym==0.4.0' (or pip install -e '.[skyrl]')")

from skyrl_gym.envs.base_text_env import BaseTextEnv

from agent_envs.family import family_of
from wrappers.credit import get_estimator
from wrappers.integrations import skyrl as adapter

WIN = ["search[trail running shoes]", "click[b000000001]", "click[navy blue]", "click[10]", "click[buy now]"]


@pytest.fixture()
def config(mini_dir: str) -> dict:
    return {"env_id": "WebShop-Rubric-v0", "max_turns": 6,
            "env_kwargs": {"catalogue": mini_dir, "verify": False, "tagger": "lexicon"}}


def play(env: BaseTextEnv, actions: list[str]) -> list[dict]:
    conv, meta = env.init([{"role": "user", "content": "the dataset prompt is replaced"}])
    assert meta["task_id"] == "webshop/human/0"
    assert conv[0]["role"] == "user" and "Possible actions: search[<your query>]" in conv[0]["content"]
    outs = []
    for a in actions:
        outs.append(env.step(f"<think>go</think><action>{a}</action>"))
        if outs[-1]["done"]:
            break
    return outs


def test_registered_and_made_by_skyrl_gym(config: dict) -> None:
    assert adapter.ENV_CLASS in skyrl_gym.registry
    env = skyrl_gym.make("rubricgym", env_config=config, extras={"task": 0, "seed": 0})
    assert isinstance(env, BaseTextEnv) and isinstance(env, adapter.RubricTextEnv)
    outs = play(env, WIN)
    # five decisions: four valid navigation steps with reward 0, then the purchase (task reward 10)
    assert [o["reward"] for o in outs] == [0.0, 0.0, 0.0, 0.0, 10.0]
    assert [o["done"] for o in outs] == [False] * 4 + [True]
    assert [o["postprocessed_action"] for o in outs] == WIN
    assert all(o["observations"][0]["role"] == "user" for o in outs[:4]) and outs[-1]["observations"] == []
    assert "click[buy now]" in outs[1]["observations"][0]["content"]  # the product page lists it
    # each decision is a Step (also in the step metadata), in order
    assert [s.action for s in env.steps] == WIN and [o["metadata"]["step"] for o in outs] == env.steps
    assert [s.reward for s in env.steps] == [0.0, 0.0, 0.0, 0.0, 10.0] and all(s.valid for s in env.steps)
    assert env.steps[0].state_key != env.steps[1].state_key and env.steps[0].rubric != {}
    traj = env.trajectory(slot=0)
    assert traj.success and traj.score == 1.0 and traj.outcome == 10.0 and not traj.truncated
    assert env.get_metrics() == {"success": 1.0, "score": 1.0, "steps": 5, "invalid_share": 0.0}
    env.close()


def test_invalid_responses_are_penalised_and_max_turns_ends(config: dict) -> None:
    env = skyrl_gym.make("rubricgym", env_config={**config, "max_turns": 2}, extras={"task": 0})
    env.init([])
    first = env.step("no action block at all")
    assert first["reward"] == pytest.approx(-0.1) and first["metadata"]["valid"] is False
    assert first["postprocessed_action"] == "<no action>" and not first["done"]
    second = env.step("<action>search[shoes]</action>")
    assert second["done"] and second["reward"] == 0.0  # the turn limit, not the environment, ends it
    traj = env.trajectory(slot=1)
    assert traj.truncated and not traj.success and [s.penalty for s in traj.steps] == [-0.1, 0.0]
    env.close()


def test_the_generators_max_turns_ends_the_episode(config: dict) -> None:
    """SkyRL's generator passes ``generator.max_turns`` as ``extras["max_turns"]`` (and ends a
    trajectory only when the environment says done): it used to be ignored, so an episode
    given 2 turns ran on to the env_config's limit."""
    for env_config, extras in (({**config, "max_turns": 6}, {"task": 0, "max_turns": 2}),
                               ({k: v for k, v in config.items() if k != "max_turns"}, {"task": 0, "max_turns": 2}),
                               ({**config, "max_turns": 2}, {"task": 0, "max_turns": 6})):  # the smaller limit wins
        env = skyrl_gym.make("rubricgym", env_config=env_config, extras=extras)
        outs = play(env, WIN)
        assert env.max_turns == 2 and [o["done"] for o in outs] == [False, True]
        assert env.trajectory().truncated and [s.action for s in env.steps] == WIN[:2]
        env.close()
    with pytest.raises(ValueError, match=r"extras\['max_turns'\] \(generator.max_turns\) must be a positive int, got 0"):
        skyrl_gym.make("rubricgym", env_config=config, extras={"task": 0, "max_turns": 0})
    with pytest.raises(ValueError, match=r"env_config\['max_turns'\] must be a positive int, got '3'"):
        skyrl_gym.make("rubricgym", env_config={**config, "max_turns": "3"}, extras={"task": 0})


def test_recorded_trajectories_feed_step_level_credit(config: dict) -> None:
    trajs = []
    for slot, actions in enumerate([WIN, WIN[:1] + ["click[b000000002]", "click[buy now]"]]):
        env = skyrl_gym.make("rubricgym", env_config=config, extras={"task": 0})
        play(env, actions)
        trajs.append(env.trajectory(slot=slot))
        env.close()
    assert [t.success for t in trajs] == [True, False]
    res = get_estimator("gigpo", gamma=1.0, episode_weight=0.0)([trajs])[0]
    # the search page (shared by both rollouts) is one anchor group: R = 10 vs 0 -> ±(5)/(10/√2 + 1e-6)
    x = 5.0 / (10.0 / 2 ** 0.5 + 1e-6)
    assert res.advantages[0][0] == pytest.approx(x) and res.advantages[1][0] == pytest.approx(-x)


def test_bad_config_is_named(config: dict) -> None:
    with pytest.raises(ValueError, match="unknown rubricgym env_config keys"):
        skyrl_gym.make("rubricgym", env_config={**config, "envid": "x"}, extras={})


def test_omegaconf_env_config_as_skyrl_passes_it(config: dict) -> None:
    from omegaconf import OmegaConf  # (a skyrl-gym dependency)

    env = skyrl_gym.make("rubricgym", env_config=OmegaConf.create(config), extras={"task": 0})
    assert [o["reward"] for o in play(env, WIN)][-1] == 10.0
    env.close()


# Sokoban-Rubric-v0, level 3 of the train split (the environment's docstring shows it): the player
# P must walk round to the box's right (7 moves: to (1, 4) and down), push it left twice, step
# up and left (2) and push it down onto the target: 12 moves, the last one placing the box
SOKOBAN = {"env_id": "Sokoban-Rubric-v0", "max_turns": 15}
LEVEL_3 = "######\n#____#\n#__X_#\n#O__##\n#P_###\n######"


def test_sokoban_won_by_replaying_the_family_experts_solution() -> None:
    """Sokoban through the adapter with nothing Sokoban-specific in it: the family's expert
    solves the level the row names, and its solution, replayed as responses, wins."""
    env = skyrl_gym.make("rubricgym", env_config=SOKOBAN, extras={"task": 3, "split": "train", "seed": 0})
    conv, meta = env.init([{"role": "user", "content": "the dataset prompt is replaced"}])
    assert meta["task_id"] == "sokoban/6x6-1box/3" and "box onto the target" in meta["goal"]
    assert LEVEL_3 in conv[0]["content"] and "Possible actions: up | down | left | right" in conv[0]["content"]
    plan = family_of("Sokoban-Rubric-v0").expert_plan(env.episode.info)
    assert len(plan) == 12
    outs = [env.step(f"<think>push</think><action>{a}</action>") for a in plan]
    # -0.1 a move; the last also +1 (box on target) +10 (solved)
    assert [o["reward"] for o in outs] == pytest.approx([-0.1] * 11 + [10.9])
    assert [o["done"] for o in outs] == [False] * 11 + [True] and outs[-1]["observations"] == []
    assert [o["postprocessed_action"] for o in outs] == plan and outs[-1]["metadata"]["won"]
    # before the last move the player stands above the box, which one push places
    assert env.steps[-1].rubric == {"box_pushable": True, "boxes_on_target": 0, "box_deadlocked": False,
                                    "solved": False, "invalid_actions": 0}
    traj = env.trajectory(slot=0)
    assert traj.success and traj.score == 1.0 and traj.outcome == pytest.approx(9.8) and not traj.truncated
    assert env.get_metrics() == {"success": 1.0, "score": 1.0, "steps": 12, "invalid_share": 0.0}
    env.close()


def test_sokoban_invalid_moves_and_the_turn_limit() -> None:
    env = skyrl_gym.make("rubricgym", env_config={**SOKOBAN, "max_turns": 2}, extras={"task": 3, "split": "train"})
    env.init([])
    first, second = env.step("<action>jump</action>"), env.step("<action>left</action>")  # left: into a wall
    assert first["reward"] == pytest.approx(-0.1) and first["metadata"]["valid"] is False and not first["done"]
    assert second["reward"] == pytest.approx(-0.1) and second["metadata"]["valid"] and second["done"]
    assert LEVEL_3 in first["observations"][0]["content"]  # nothing moved
    traj = env.trajectory()
    assert traj.truncated and not traj.success and [s.rubric["invalid_actions"] for s in traj.steps] == [0, 1]
    env.close()


def test_docstring_example_runs() -> None:
    import doctest

    assert doctest.testmod(adapter).failed == 0
