"""rubricgym environments as network services that speak OpenEnv's protocol.

OpenEnv (``pip install 'rubricgym[openenv]'``) is the environment-server standard of Meta and
Hugging Face: typed ``reset``/``step``/``state`` over HTTP and, for episodes, one WebSocket
session per environment (``/ws``).  This package serves any registered rubricgym environment id
with OpenEnv's own server (:mod:`agent_envs.serving.server`, ``rubricgym serve ENV``) and talks
to one with OpenEnv's own client (:mod:`agent_envs.serving.client`); the environment pool's
``backend="remote"`` (:mod:`agent_envs.remote_pool`) steps its episodes on such servers.

* :mod:`agent_envs.serving.models` — the typed action (text, or a tool call of
  :mod:`agent_envs.agent.tools`), observation (the text; the step's whole ``info`` — rubric
  channels, keys, admissible actions, ``won``, ``score`` — in its ``metadata``) and state;
* :mod:`agent_envs.serving.server` — the OpenEnv ``Environment`` over :func:`~agent_envs.registration.make_env`
  and the FastAPI app of OpenEnv's ``create_app``;
* :mod:`agent_envs.serving.client` — OpenEnv's ``EnvClient`` typed for these models, and
  :class:`~agent_envs.serving.client.RemoteRubricEnv`, a Gymnasium environment played on a server;
* :mod:`agent_envs.serving.cli` — ``rubricgym serve``.

Importing this package imports neither OpenEnv nor an engine; its modules import OpenEnv.
"""
