"""The agent's interface to an environment: decision prompts, reply parsing, chat turns and
function-calling tools — what the trainer, every RL-library adapter and ``rubricgym eval``
share (a layer below ``wrappers`` and ``trainers``; no model library imported).

* :mod:`agent_envs.agent.prompts` — the decision prompt and the ``<action>`` reply format;
* :mod:`agent_envs.agent.chat` — chat messages and chat-template turns;
* :mod:`agent_envs.agent.tools` — the same actions as function-calling tools.
* :mod:`agent_envs.agent.walkthrough` — the expert: stored walkthroughs replayed as a policy.
"""
