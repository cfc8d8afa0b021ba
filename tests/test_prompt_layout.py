"""The rendered prompt's layout: a multi-line observation (Sokoban's grid, ALFWorld's paragraphs)
begins on its own line, so its rows stay aligned; a one-line observation (WebShop's page) stays
on the lead-in's line.  Checked on the prompts the trainer and the eval actually send."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agent_envs  # noqa: F401  (registers the environments)
from agent_envs.agent.prompts import build_prompt
from agent_envs.rollout import Turn

torch = pytest.importorskip("torch")
torch.set_num_threads(1)


def _sokoban_turn() -> tuple[Turn, str, str]:
    """Turn 2 of a real Sokoban episode: (turn, first grid, current grid)."""
    env = gym.make("Sokoban-Rubric-v0")
    first, info = env.reset(seed=0, options={"task": 0})
    action = info["admissible_actions"][0]
    obs, _r, _term, _trunc, info = env.step(action)
    env.close()
    assert "\n" in obs and obs.splitlines()[0].startswith("#")
    return Turn(0, 0, 1, obs, info, ((first, action),)), first, obs


def _block_after(text: str, lead: str) -> list[str]:
    """The lines after the line that is exactly ``lead``, up to the next lead-in or list."""
    lines = text.splitlines()
    start = lines.index(lead) + 1
    end = next(k for k in range(start, len(lines)) if lines[k].startswith(("[turn", "Now (turn", "Possible")))
    return lines[start:end]


def test_the_eval_prompt_shows_the_sokoban_grid_row_for_row():
    from trainers.evaluate.runner import EvalSettings, _prompt

    turn, first, obs = _sokoban_turn()
    [user] = [m["content"] for m in _prompt(turn, EvalSettings()) if m["role"] == "user"]
    assert _block_after(user, "Now (turn 2) you see:") == obs.splitlines()
    assert _block_after(user, "[turn 1] saw:") == first.splitlines()
    assert "you see: #" not in user and "saw: #" not in user  # the first row is not on the lead-in's line


def test_the_trainer_prompt_shows_the_sokoban_grid_row_for_row():
    from trainers.lm_policy import RolloutSettings, decision_prompt
    from trainers.models import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    turn, first, obs = _sokoban_turn()
    ids = decision_prompt(tok, turn.info["task"]["goal"], obs, dict(turn.info), turn.history, RolloutSettings())
    text = tok.decode(ids)
    assert _block_after(text, "Now (turn 2) you see:") == obs.splitlines()
    assert _block_after(text, "[turn 1] saw:") == first.splitlines()
    assert "Possible actions: up | down | left | right" in text


def test_one_line_observations_stay_on_the_lead_in_line_and_indentation_is_kept():
    webshop = "WebShop [SEP] Instruction: [SEP] i need running shoes [SEP] Search"
    p = build_prompt("buy shoes", f"  {webshop} ", ["search[<your query>]"], [(webshop, "search[shoes]")],
                     style="action_only", step=1)
    assert f"Now (turn 2) you see: {webshop}\n" in p and f"[turn 1] saw: {webshop}\n" in p
    alfworld = "-= Welcome =-\n\nYou arrive at shelf 1.\n\nLocation: shelf 1. Holding: nothing."
    p = build_prompt("put a mug in sink", alfworld, ["look"], [], style="action_only")
    assert "Now (turn 1) you see:\n-= Welcome =-\n\nYou arrive at shelf 1.\n\nLocation:" in p
    indented = "\n\n  __\n #P_\n"  # blank lines before go, the first row keeps its indentation
    assert "you see:\n  __\n #P_\nPossible actions: up" in build_prompt("g", indented, ["up"], [], style="action_only")
