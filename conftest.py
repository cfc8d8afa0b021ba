"""Repository-wide pytest rules for the docstring examples (``--doctest-modules``, see
``[tool.pytest.ini_options]`` in pyproject.toml); the suite's own rules are in
``tests/conftest.py``.

* A module that cannot be imported because an optional engine is not installed is skipped
  (``--doctest-ignore-import-errors``); under ``RUBRICGYM_STRICT_SKIPS=1`` (CI, where every
  extra is installed) such a skip is a failure, so a broken import cannot hide.
* A docstring example that fails because an optional module is not installed
  (``ModuleNotFoundError``) is skipped, with the module named; under strict skips it fails.
* The terminal summary prints how many docstring examples ran.
* ``wrappers/integrations/verl.py`` and ``tests/integrations/verl_cases.py`` are collected only
  where verl is installed (its own venv); the OpenEnv modules (``agent_envs/serving/``) and
  ``tests/integrations/openenv_cases.py`` only where openenv is (its own venv).
"""

from __future__ import annotations

import doctest
import importlib.util
import os

import pytest

_STRICT = os.environ.get("RUBRICGYM_STRICT_SKIPS", "") not in ("", "0", "false")

# verl caps transformers below the main environment's, so the modules importing it are only
# importable in verl's own venv: they run there (tests/test_integration_verl.py passes them to that
# venv's pytest), and the main environment does not collect them.
_VERL_ONLY = ["wrappers/integrations/verl.py", "tests/integrations/verl_cases.py"]
collect_ignore = [] if importlib.util.find_spec("verl") else _VERL_ONLY
# OpenEnv moves pins of the main environment too: the modules importing it run in its own venv
# (tests/test_serving_openenv.py passes them to that venv's pytest).
_OPENENV_ONLY = ["agent_envs/serving/models.py", "agent_envs/serving/server.py", "agent_envs/serving/client.py",
                 "tests/integrations/openenv_cases.py"]
collect_ignore = collect_ignore + ([] if importlib.util.find_spec("openenv") else _OPENENV_ONLY)
_DOCTESTS: set[str] = set()


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if _STRICT and report.skipped and type(collector).__name__ == "DoctestModule":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"doctest module skipped under RUBRICGYM_STRICT_SKIPS=1 (CI): {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if _STRICT or call.when != "call" or call.excinfo is None or type(item).__name__ != "DoctestItem":
        return
    exc = call.excinfo.value
    missing = exc.exc_info[1] if isinstance(exc, doctest.UnexpectedException) else None
    if isinstance(missing, ModuleNotFoundError):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.reportinfo()[1] or 0, f"optional module not installed: {missing}")


def pytest_collection_modifyitems(items):
    _DOCTESTS.update(item.nodeid for item in items if type(item).__name__ == "DoctestItem")


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter):
    if not _DOCTESTS or terminalreporter.config.option.collectonly:
        return
    counts = {}
    for outcome in ("passed", "failed", "skipped"):
        counts[outcome] = len({r.nodeid for r in terminalreporter.stats.get(outcome, [])
                               if getattr(r, "nodeid", None) in _DOCTESTS})
    modules = len({nodeid.split("::")[0] for nodeid in _DOCTESTS})
    terminalreporter.write_line(
        f"doctests: {len(_DOCTESTS)} docstrings with examples in {modules} modules: {counts['passed']} passed, "
        f"{counts['failed']} failed, {counts['skipped']} skipped"
    )
