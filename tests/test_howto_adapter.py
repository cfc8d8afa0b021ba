# The steps of docs/howto/adapter.md ("Writing an RL-library adapter"), done with a toy library:
# if this test fails, the how-to no longer works as written.
"""An adapter is the library's turn contract written over ``TextEpisode``.

The toy library asks an environment for ``start(sample) -> prompt`` and
``act(response) -> (next prompt, reward, done)`` and sums the rewards of a sample. The adapter
plays rubricgym's ``Sokoban-Rubric-v0`` through :class:`~wrappers.integrations.episode.TextEpisode`
(pure Python: no extra to install), so each finished sample is a ``Trajectory`` that any
rubricgym estimator scores.

Hand-derived numbers. Level 0 of the default generator is solved by ``up, up`` (the player stands
below the box, the target two cells above the box). Rewards (verl-agent's): −0.1 per step, +1 for
a box pushed onto a target and +10 when every box is placed, so the winner's steps earn −0.1
(the box moves, not yet onto the target) and −0.1 + 1 + 10 = 10.9, 10.8 in all; the invalid reply
``<action>jump</action>`` moves nothing and earns only the −0.1 invalid-action penalty (recorded as
the step's ``penalty``), and ``down`` (a valid move) the −0.1 step cost.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from wrappers.credit import get_estimator

#: The adapter module a reader writes (wrappers/integrations/<library>.py in the project).
ADAPTER = textwrap.dedent('''
    """rubricgym environments for ToyLib: one TextEpisode per sample."""

    from wrappers.integrations.episode import TextEpisode


    class ToyLibEnv:
        """ToyLib's environment contract over any rubricgym environment.

        ToyLib calls ``start(sample)`` with a dataset row, then ``act(response)`` with each model
        response until ``done``; it sums the rewards of a sample.
        """

        def __init__(self, env_id, env_kwargs=None, max_turns=15):
            self.episode = TextEpisode(env_id, env_kwargs, max_steps=max_turns)

        def start(self, sample):
            return self.episode.reset(task=sample["task"], seed=sample.get("seed"))

        def act(self, response):
            result = self.episode.step(response)
            return result.text, result.reward, result.done

        def trajectory(self, slot):
            return self.episode.trajectory(slot=slot)

        def close(self):
            self.episode.close()
''')


@pytest.fixture
def adapter():
    """Step 1: the module (here executed from the text above, as the page prints it)."""
    namespace: dict = {"__name__": "toylib_adapter"}
    exec(compile(ADAPTER, "toylib_adapter.py", "exec"), namespace)  # noqa: S102 - the how-to's code
    return namespace["ToyLibEnv"]


def _play(env, sample, responses):
    """What ToyLib does with one sample: start, then one response per turn until done."""
    prompt, total, done = env.start(sample), 0.0, False
    assert "<action>" in prompt and "Possible actions: up | down | left | right" in prompt
    for response in responses:
        prompt, reward, done = env.act(response)
        total += reward
        if done:
            break
    return total, done


def test_a_sibling_group_through_the_adapter_gets_step_credit(adapter) -> None:
    """Steps 2 and 3: play a group of siblings through the library's contract, then score the
    recorded trajectories with any rubricgym estimator."""
    sample = {"task": 0, "seed": 0}
    envs = [adapter("Sokoban-Rubric-v0") for _ in range(2)]
    try:
        win_total, win_done = _play(envs[0], sample, ["<action>up</action>", "I push: <action>up</action>"])
        lose_total, lose_done = _play(envs[1], sample, ["<action>jump</action>", "<action>down</action>"])
        group = [envs[0].trajectory(slot=0), envs[1].trajectory(slot=1)]
    finally:
        for env in envs:
            env.close()

    assert win_done and win_total == pytest.approx(-0.1 + 10.9)
    assert not lose_done and lose_total == pytest.approx(-0.1 - 0.1)
    win, lose = group
    assert [s.action for s in win.steps] == ["up", "up"] and win.success
    assert [s.valid for s in lose.steps] == [False, True] and not lose.success
    assert lose.steps[0].penalty == pytest.approx(-0.1)
    assert win.steps[0].state_key == lose.steps[0].state_key        # siblings start identically

    res = get_estimator("grpo")([group])[0]
    # GRPO normalises Z = O + penalty over the group's 4 rows: O_win = -0.1 + 10.9 = 10.8,
    # O_lose = 0 - 0.1 = -0.1, so Z = (10.8, 10.8, -0.1 - 0.1, -0.1 + 0) = (10.8, 10.8, -0.2, -0.1);
    # mean 21.3 / 4 = 5.325, deviations (5.475, 5.475, -5.525, -5.425)
    # and the sample standard deviation sqrt(sum(dev^2) / 3) = sqrt(119.9075 / 3) = 6.32212
    dev = np.array([5.475, 5.475, -5.525, -5.425])
    expected = dev / 6.32212
    np.testing.assert_allclose(np.concatenate(res.advantages), expected, atol=1e-5)
    assert res.advantages[0][0] > 0 > res.advantages[1][0]


def test_an_unparseable_response_is_an_invalid_action_not_an_error(adapter) -> None:
    env = adapter("Sokoban-Rubric-v0", max_turns=3)
    try:
        env.start({"task": 1, "seed": 0})
        _, reward, done = env.act("I would rather not say")
        assert not done and reward == pytest.approx(-0.1)
        assert env.trajectory(slot=0).steps[0].valid is False
    finally:
        env.close()
