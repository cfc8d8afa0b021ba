"""Run a file of test cases once in another venv and read back each case's outcome.

verl and OpenEnv pin packages the main environment cannot hold, so their cases run under their
own venv's pytest (``RUBRICGYM_VERL_PYTHON``, ``RUBRICGYM_OPENENV_PYTHON``, made by ``.ci/run``)
and the main suite reports them one test per case from the JUnit XML.
"""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_in_venv(variable: str, name: str, venv_command: str, paths: list[str], out_dir: Path,
                extra_args: tuple[str, ...] = ()) -> dict[str, tuple[str, str]]:
    """``{case name: (outcome, message)}`` of ``paths`` run by the venv whose python ``variable``
    names; skips (naming ``venv_command``) when the variable is unset."""
    python = os.environ.get(variable)
    if not python:
        pytest.skip(f"{name}'s venv is not set up ({variable} is unset); create it with: {venv_command}")
    if not Path(python).is_file():
        pytest.fail(f"{variable}={python} does not exist; create the venv with: {venv_command}")
    xml = out_dir / "cases.xml"
    done = subprocess.run(
        [python, "-m", "pytest", *paths, "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", *extra_args],
        cwd=REPO, capture_output=True, text=True, timeout=1800, check=False)
    if not xml.is_file():
        pytest.fail(f"{name}'s venv did not run the cases (exit {done.returncode}):\n{done.stdout[-4000:]}\n"
                    f"{done.stderr[-4000:]}")
    results = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome, message = tag, (node.get("message") or "") + "\n" + (node.text or "")
        results[case.get("name")] = (outcome, message)
    return results
