"""WebShop engine (clean-room, faithful to upstream princeton-nlp/WebShop's text mode).

Modules: :mod:`~agent_envs.webshop.generator` (seeded catalogue in upstream's raw format),
:mod:`~agent_envs.webshop.catalogue` (loading, sha256 verification, the shared per-process
catalogue), :mod:`~agent_envs.webshop.goals`, :mod:`~agent_envs.webshop.scorer` (the reward
with every component), :mod:`~agent_envs.webshop.search` (BM25), :mod:`~agent_envs.webshop.session`
(the per-session page state machine), :mod:`~agent_envs.webshop.render` (text observations),
:mod:`~agent_envs.webshop.rubric` (channels, keys, action keys) and
:mod:`~agent_envs.webshop.env` (``WebShop-Rubric-v0``).

Importing this package imports no engine dependency; the environment is made with
``gym.make("WebShop-Rubric-v0")`` after ``import agent_envs``.
"""
