"""Import hygiene and the command line."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_rubrics_and_wrappers_import_no_torch_or_engine() -> None:
    """... and the estimators' data model and the estimators run without Gymnasium or the
    environments' package (``rubrics.trajectory`` is the bottom layer)."""
    code = (
        "import sys, rubrics, wrappers, wrappers.credit; "
        "from rubrics.trajectory import Step, Trajectory; "
        "g = [Trajectory('t', k, [Step('s0', a, keys={'exact': 's0'}), Step('s1', 'b', reward=r)], success=r > 0) "
        "for k, (a, r) in enumerate([('a', 10.0), ('c', 0.0)])]; "
        "[wrappers.credit.get_estimator(n)([g]) for n in ('grpo', 'rloo', 'gigpo', 'graphgpo', 'milegpo', 'mcgpo')]; "
        "bad = [m for m in ('torch', 'alfworld', 'textworld', 'transformers', 'flask', 'bm25s', "
        "'sentence_transformers', 'selenium', 'gymnasium', 'agent_envs') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"heavy modules imported: {out.stdout}"


def test_integrations_import_no_rl_library() -> None:
    """``wrappers.integrations``, its shared episode module and the TRL ``environment_factory``
    adapter (duck-typed) import no RL library, torch or engine; each adapter module imports only
    its own library."""
    code = (
        "import sys, wrappers, wrappers.integrations, wrappers.integrations.episode, wrappers.integrations.trl_env; "
        "bad = [m for m in ('trl', 'skyrl_gym', 'openrlhf', 'verl', 'ray', 'torch', 'transformers', 'datasets', "
        "'alfworld', 'textworld') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"heavy modules imported: {out.stdout}"
    for module, library, others in (("skyrl", "skyrl_gym", ("trl", "openrlhf", "verl", "torch")),
                                    ("openrlhf_agent", "openrlhf", ("trl", "skyrl_gym", "verl")),
                                    ("trl_grpo", "trl", ("skyrl_gym", "openrlhf", "verl"))):
        pytest.importorskip(library)
        code = (f"import sys, wrappers.integrations.{module}; "
                f"print(','.join(m for m in {others!r} if m in sys.modules))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "", f"wrappers.integrations.{module} imported {out.stdout}"


def test_agent_envs_import_registers_without_engines() -> None:
    code = (
        "import sys, gymnasium as gym, agent_envs; "
        "assert 'ALFWorld-Rubric-v0' in gym.registry and 'WebShop-Rubric-v0' in gym.registry; "
        "print(','.join(m for m in ('torch', 'alfworld', 'textworld', 'flask') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def _commands(args: list[str]) -> list[str]:
    """Subcommand names listed by ``rubricgym ARGS --help``."""
    out = subprocess.run(
        [sys.executable, "-m", "trainers.cli", *args, "--help"],
        capture_output=True, text=True, env={"COLUMNS": "200", "PATH": ""}, check=True,
    ).stdout
    names, in_block = [], False
    for line in out.splitlines():
        if "Commands" in line:
            in_block = True
            continue
        if in_block:
            if line.startswith("╰"):
                break
            if line.startswith("│   "):  # a wrapped help line, not a command
                continue
            parts = line.strip("│ ").split()
            if parts:
                names.append(parts[0])
    return names


def test_every_subcommand_has_help() -> None:
    top = _commands([])
    assert {"data", "envs"} <= set(top)
    seen = 0
    stack = [[c] for c in top]
    while stack:
        path = stack.pop()
        result = subprocess.run(
            [sys.executable, "-m", "trainers.cli", *path, "--help"],
            capture_output=True, text=True, env={"COLUMNS": "200", "PATH": ""}, check=False,
        )
        assert result.returncode == 0, f"rubricgym {' '.join(path)} --help failed: {result.stderr}"
        # typer's commands print "Usage:"; train and arena hand --help to tyro ("usage:")
        assert "usage:" in result.stdout.lower()
        seen += 1
        stack.extend(path + [c] for c in _commands(path)) if "Commands" in result.stdout else None
    assert seen >= len(top)


@pytest.mark.parametrize("module", ["rubrics", "wrappers", "agent_envs", "trainers", "wrappers.credit",
                                    "wrappers.integrations.episode"])
def test_docstring_examples_run(module: str) -> None:
    import doctest
    import importlib

    mod = importlib.import_module(module)
    result = doctest.testmod(mod)
    assert result.failed == 0


#: The layers, lowest first: a module may import its own layer and those below, never above.
LAYERS = ("rubrics", "agent_envs", "wrappers", "trainers")


def _imported_packages(path) -> set[tuple[str, int]]:
    """(top-level package, line) of every import in a file, lazy imports inside functions too."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {(alias.name.split(".")[0], node.lineno) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add((node.module.split(".")[0], node.lineno))
    return found


def test_no_import_runs_back_up_the_layers() -> None:
    """rubrics ← agent_envs ← wrappers ← trainers (CONTRIBUTING.md): e.g. the RL-library adapters
    in wrappers/integrations take the agent's prompts from agent_envs.agent, not from trainers."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    wrong = []
    for rank, package in enumerate(LAYERS):
        for path in sorted((root / package).rglob("*.py")):
            for name, line in sorted(_imported_packages(path)):
                if name in LAYERS[rank + 1:]:
                    wrong.append(f"{path.relative_to(root)}:{line} imports {name}")
    assert not wrong, "imports that run back up the layers:\n" + "\n".join(wrong)


def test_the_shared_report_imports_no_arena_module() -> None:
    """The report that trainer and arena share sits below both: no import of ``trainers.arena``
    in ``trainers/report.py`` or ``trainers/sources.py`` (lazy ones included), and importing the
    report loads none (the arena registers how its runs read, :mod:`trainers.sources`)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    wrong = []
    for name in ("trainers/report.py", "trainers/sources.py"):
        for node in ast.walk(ast.parse((root / name).read_text(encoding="utf-8"))):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            wrong += [f"{name}:{node.lineno} imports {m}" for m in modules if m.startswith("trainers.arena")]
    assert not wrong, "\n".join(wrong)
    code = ("import sys, trainers.report, trainers.sources; "
            "print(','.join(m for m in sys.modules if m.startswith('trainers.arena')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"importing the report loaded {out.stdout}"
