"""What ``pip install -e ".[openrlhf]" && pip install --no-deps openrlhf==0.11.2`` must give
OpenRLHF's agent module, and what the OpenRLHF test says when something is missing."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]

#: The top-level packages that the OpenRLHF modules ``import openrlhf.utils.agent`` loads import
#: unconditionally (their own dependencies are their packaging's business).
IMPORTED = """
import ast, json, sys
import openrlhf.utils.agent
names = set()
for m in [m for name, m in sys.modules.items() if name.split(".")[0] == "openrlhf"]:
    for node in ast.parse(open(m.__file__).read()).body:
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
print(json.dumps(sorted(names)))
"""


def _extra_requirements(extra: str) -> set[str]:
    """The distributions rubricgym's core and ``extra`` name (self-references expanded)."""
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras, todo, seen = project["optional-dependencies"], [extra], set()
    names = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    while todo:
        for r in map(Requirement, extras[todo.pop()]):
            if canonicalize_name(r.name) == "rubricgym":
                todo.extend(x for x in r.extras if x not in seen)
                seen.update(r.extras)
            else:
                names.add(canonicalize_name(r.name))
    return names


def _installed_closure(names: set[str]) -> set[str]:
    """``names`` and every distribution they require, as installed here (markers evaluated)."""
    env, out, todo = default_environment(), set(), list(names)
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out.add(name)
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for req in map(Requirement, reqs):
            if req.marker is None or req.marker.evaluate({**env, "extra": ""}):
                todo.append(canonicalize_name(req.name))
    return out


def test_the_openrlhf_extra_installs_what_openrlhfs_agent_module_imports() -> None:
    pytest.importorskip("openrlhf", reason="OpenRLHF is not installed: pip install --no-deps openrlhf==0.11.2")
    run = subprocess.run([sys.executable, "-c", IMPORTED], capture_output=True, text=True, timeout=300, check=True)
    modules = [m for m in json.loads(run.stdout.splitlines()[-1]) if m not in sys.stdlib_module_names]
    providers = md.packages_distributions()
    covered = _installed_closure(_extra_requirements("openrlhf"))
    missing = {m: dists for m in modules if m != "openrlhf" and (dists := providers.get(m))
               and not {canonicalize_name(d) for d in dists} & covered}
    assert not missing, f"modules OpenRLHF's agent module imports that the openrlhf extra does not install: {missing}"
    assert {"transformers", "torch"} <= covered


def test_the_skip_names_the_module_that_failed(tmp_path) -> None:
    """With ``transformers`` missing (blocked here), the OpenRLHF test skips saying so, with the
    install command, instead of "OpenRLHF is not installed"."""
    code = ("import sys; sys.modules['transformers'] = None; import pytest; "
            f"sys.exit(pytest.main([{str(ROOT / 'tests' / 'test_integration_openrlhf.py')!r}, '-rs', '-q', "
            "'-p', 'no:cacheprovider', '-p', 'no:randomly']))")
    env = {k: v for k, v in os.environ.items() if k != "RUBRICGYM_STRICT_SKIPS"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env=env, check=False)
    out = run.stdout + run.stderr
    assert run.returncode in (0, 5), out  # the module skipped: nothing ran
    skip = next(line for line in out.splitlines() if line.startswith("SKIPPED"))
    if "OpenRLHF is not installed" in skip:  # nothing else can be said without OpenRLHF
        pytest.skip("OpenRLHF is not installed: pip install --no-deps openrlhf==0.11.2")
    assert re.search(r"does not import: .*transformers", skip), skip
    assert 'pip install -e ".[openrlhf]"' in skip, skip
