"""OpenEnv servers and clients (``rubricgym serve``, ``agent_envs.serving``) and the pool's
``backend="remote"``, tested with OpenEnv's own code in OpenEnv's own venv.

``openenv`` pulls gradio, fastmcp and huggingface_hub and would move pins of this suite's
environment, so the end-to-end cases live in ``tests/integrations/openenv_cases.py`` and run in a
venv of their own: point ``RUBRICGYM_OPENENV_PYTHON`` at that venv's python (``.ci/run`` creates
it and exports the variable).  Without it those cases skip with the command that creates the venv
(in CI a skip is a failure).  Each case of the venv run is reported here as a test of its own; the
checks that need no OpenEnv run here directly.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from venv_cases import run_in_venv  # tests/ is on sys.path

from agent_envs.registration import ENV_IDS

REPO = Path(__file__).resolve().parents[1]
CASES = "tests/integrations/openenv_cases.py"
DOCTESTS = ["agent_envs/serving/models.py", "agent_envs/serving/server.py", "agent_envs/serving/client.py"]
VENV_COMMAND = (
    'python -m venv ~/.venvs/rubricgym-openenv && '
    '~/.venvs/rubricgym-openenv/bin/pip install -e ".[openenv,alfworld,webshop]" pytest pytest-timeout && '
    'export RUBRICGYM_OPENENV_PYTHON=~/.venvs/rubricgym-openenv/bin/python'
)
EXPECTED = [
    "test_schema_health_and_metadata",
    "test_openenv_client_plays_a_won_alfworld_episode_identical_to_the_local_one",
    "test_tool_call_actions_step_the_same_action",
    "test_malformed_actions_are_invalid_steps_or_refused_and_the_session_goes_on",
    "test_concurrent_sessions_are_independent",
    "test_a_server_restart_fails_the_call_in_flight_and_the_client_reconnects",
    "test_capacity_is_refused_and_sigterm_with_an_open_session_exits_0",
    "test_bad_serve_arguments_exit_with_one_line",
    "test_workers_share_the_port",
    "test_webshop_server_plays_the_oracle_to_a_purchase",
    *[f"test_every_registered_environment_serves[{env_id}]" for env_id in sorted(ENV_IDS)],
    "test_trl_environment_factory_plays_on_the_server",
    "test_group_runner_arun_on_two_servers_equals_the_local_run",
    "test_episode_pool_of_the_rl_adapters_plays_on_the_servers",
    "test_an_environment_error_fails_its_request_only",
    "test_a_killed_server_fails_its_episodes_naming_it_and_the_other_goes_on",
    "test_group_runner_arun_fails_naming_a_killed_server",
    "test_a_stopped_server_times_out_and_an_absent_one_cannot_be_reached",
]


@pytest.fixture(scope="module")
def openenv_run(tmp_path_factory) -> dict[str, tuple[str, str]]:
    """Run the cases once in OpenEnv's venv: ``{case name: (outcome, message)}``."""
    return run_in_venv("RUBRICGYM_OPENENV_PYTHON", "OpenEnv", VENV_COMMAND, [CASES, *DOCTESTS],
                       tmp_path_factory.mktemp("openenv"))


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the first case's setup runs the whole venv session
@pytest.mark.parametrize("case", EXPECTED)
def test_openenv_case(openenv_run, case):
    assert case in openenv_run, f"{case} did not run in OpenEnv's venv; ran: {sorted(openenv_run)}"
    outcome, message = openenv_run[case]
    assert outcome == "passed", f"{case}: {outcome} in OpenEnv's venv\n{message[-4000:]}"


@pytest.mark.slow
def test_openenv_cases_all_listed(openenv_run):
    """A case added to openenv_cases.py is listed here too (so each is reported)."""
    cases = [name for name in openenv_run if not name.startswith("agent_envs.serving")]
    assert sorted(cases) == sorted(EXPECTED)


@pytest.mark.slow
def test_serving_doctests_pass_in_openenvs_venv(openenv_run):
    doctests = {name: res for name, res in openenv_run.items() if name.startswith("agent_envs.serving")}
    assert doctests, f"no docstring example of {DOCTESTS} ran in OpenEnv's venv; ran: {sorted(openenv_run)}"
    # a module whose every example needs a running server marks them all +SKIP: pytest reports that as a skip
    failed = {name: res for name, res in doctests.items()
              if res[0] != "passed" and not (res[0] == "skipped" and "all tests skipped by +SKIP" in res[1])}
    assert not failed, failed
    assert any(res[0] == "passed" for res in doctests.values()), doctests


# --- without OpenEnv ---------------------------------------------------------------------------


def test_library_imports_no_openenv():
    """``agent_envs`` (with the serving package, the remote pool and the serve command),
    ``rubrics`` and ``wrappers`` import neither OpenEnv nor its server stack nor an engine."""
    code = ("import sys, rubrics, wrappers, agent_envs, agent_envs.pool, agent_envs.remote_pool, agent_envs.serving, "
            "agent_envs.serving.cli, trainers.cli; "
            "print(','.join(m for m in ('openenv', 'fastapi', 'uvicorn', 'websockets', 'gradio', 'alfworld', "
            "'textworld', 'torch') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


def test_remote_pool_arguments_are_named():
    from agent_envs.pool import EnvPool

    with pytest.raises(ValueError, match="backend='remote' takes the servers' urls"):
        EnvPool("ALFWorld-Rubric-v0", backend="remote")
    with pytest.raises(ValueError, match="urls go only with backend='remote'"):
        EnvPool("ALFWorld-Rubric-v0", workers=1, urls=["http://127.0.0.1:1"])
    with pytest.raises(ValueError, match="non-empty list of server addresses"):
        EnvPool("ALFWorld-Rubric-v0", backend="remote", urls="http://127.0.0.1:8000")
    with pytest.raises(ValueError, match="must start with http://"):
        EnvPool("ALFWorld-Rubric-v0", backend="remote", urls=["127.0.0.1:8000"])


def test_serve_without_openenv_says_how_to_install_it():
    if importlib.util.find_spec("openenv") is not None:  # an environment with openenv: the venv's cases cover it
        return
    done = subprocess.run([sys.executable, "-m", "trainers.cli", "serve", "ALFWorld-Rubric-v0"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1 and "pip install 'rubricgym[openenv]'" in done.stderr
