"""verl integration, tested with verl's own code in verl's own venv.

verl 0.9 caps transformers below 5.11 (this suite's environment has a newer one), so the cases
live in ``tests/integrations/verl_cases.py`` and run in a venv of their own: point
``RUBRICGYM_VERL_PYTHON`` at that venv's python (``.ci/run`` creates it and exports the
variable).  Without it the verl cases skip with the command that creates the venv (in CI a
skip is a failure).  Each case of the venv run is reported here as a test of its own.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from venv_cases import run_in_venv  # tests/ is on sys.path

REPO = Path(__file__).resolve().parents[1]
CASES = "tests/integrations/verl_cases.py"
DOCTESTS = "wrappers/integrations/verl.py"  # its docstring examples need verl: they run in the venv too
VENV_COMMAND = (
    'python -m venv ~/.venvs/rubricgym-verl && ~/.venvs/rubricgym-verl/bin/pip install torch==2.13.0 && '
    '~/.venvs/rubricgym-verl/bin/pip install -e ".[verl,alfworld,webshop]" pytest pytest-timeout && '
    'export RUBRICGYM_VERL_PYTHON=~/.venvs/rubricgym-verl/bin/python'
)
EXPECTED = [
    "test_bare_import_verl_registers_everything",
    "test_plugins_disabled_registers_nothing",
    "test_register_estimators_is_idempotent_and_refuses_foreign_names",
    "test_compute_advantage_rubricgym_rloo_equals_verl_rloo",
    "test_compute_advantage_passes_algorithm_rubricgym_params",
    *[f"test_sync_trainer_advantage_stage_equals_flat_advantages[{e}-{p}]"
      for e, p in (("gigpo", "params0"), ("graphgpo", "None"), ("mcgpo", "None"), ("rloo", "None"),
                   ("milegpo", "None"), ("hgpo", "params5"))],
    "test_sync_trainer_passes_verl_agent_switches[gigpo-params0]",
    "test_sync_trainer_passes_verl_agent_switches[graphgpo-params1]",
    "test_sync_trainer_leaves_verls_padding_rows_out",
    "test_step_credit_by_hand_and_row_errors",
    "test_sync_trainer_refuses_kl_in_reward",
    "test_agent_loop_plays_webshop",
    "test_agent_loop_plays_generated_alfworld_and_feeds_the_trainer_stage",
    "test_agent_loop_plays_sokoban_to_the_experts_win",
    "test_verls_own_worker_writes_the_rows_the_trainer_stage_credits",
    "test_verls_actor_update_consumes_the_trainer_stages_advantages",
    "test_agent_loop_steps_off_the_event_loop[1]",
    "test_agent_loop_steps_off_the_event_loop[0]",
    "test_agent_loop_builds_its_pool_off_the_event_loop",
    "test_agent_loop_env_workers_as_ray_actors",
    "test_agent_loop_passes_pool_options_to_its_environments",
    "test_write_dataset_rows_feed_the_agent_loop",
    "test_doc_launch_command_composes_against_verls_config",
]


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory) -> dict[str, tuple[str, str]]:
    """Run the cases once in verl's venv: ``{case name: (outcome, message)}``."""
    return run_in_venv("RUBRICGYM_VERL_PYTHON", "verl", VENV_COMMAND, [CASES, DOCTESTS],
                       tmp_path_factory.mktemp("verl"), ("-W", "ignore::UserWarning"))


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the first case's setup runs the whole venv session (~3 min on 2 idle cores)
@pytest.mark.parametrize("case", EXPECTED)
def test_verl_case(verl_run, case):
    assert case in verl_run, f"{case} did not run in verl's venv; ran: {sorted(verl_run)}"
    outcome, message = verl_run[case]
    assert outcome == "passed", f"{case}: {outcome} in verl's venv\n{message[-4000:]}"


@pytest.mark.slow
def test_verl_cases_all_listed(verl_run):
    """A case added to verl_cases.py is listed here too (so each is reported)."""
    cases = [name for name in verl_run if not name.startswith("wrappers.integrations.verl")]
    assert sorted(cases) == sorted(EXPECTED)


def test_wrappers_never_import_verl():
    code = ("import sys, wrappers, wrappers.credit, wrappers.integrations; "
            "print(any(m == 'verl' or m.startswith(('verl.', 'wrappers.integrations.verl')) for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_without_verl_the_module_says_how_to_install_it():
    if importlib.util.find_spec("verl") is not None:  # an environment with verl: the module imports
        import wrappers.integrations.verl
        return
    with pytest.raises(ModuleNotFoundError, match=r"pip install -e '\.\[verl\]'"):
        import wrappers.integrations.verl  # noqa: F401


@pytest.mark.slow
def test_verl_module_doctests_pass_in_verls_venv(verl_run):
    """The examples of wrappers/integrations/verl.py (not collected in the main environment)."""
    doctests = {name: res for name, res in verl_run.items() if name.startswith("wrappers.integrations.verl")}
    assert doctests, f"no docstring example of {DOCTESTS} ran in verl's venv; ran: {sorted(verl_run)}"
    failed = {name: res for name, res in doctests.items() if res[0] != "passed"}
    assert not failed, failed
