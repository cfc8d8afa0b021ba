"""What a first run without the right setup is told: a missing ``alfworld`` extra named when the
environment is made, and a worker that dies because the script re-runs in it named as such."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(args: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, input=stdin, capture_output=True, text=True,
                          timeout=300, check=False)


def test_a_missing_alfworld_extra_is_named_when_the_environment_is_made(tmp_path) -> None:
    for blocked in ("alfworld", "textworld"):
        code = (f"import sys; sys.modules[{blocked!r}] = None\n"
                "import gymnasium as gym, agent_envs\n"
                "try:\n"
                "    gym.make('ALFWorld-Rubric-v0', split='generated')\n"
                "except ModuleNotFoundError as exc:\n"
                "    print('ERROR', exc.name, exc)\n")
        out = _run(["-c", code], tmp_path).stdout
        assert f"ERROR {blocked} " in out and 'pip install "rubricgym[alfworld]"' in out, out


SCRIPT = """\
import tempfile
from agent_envs.pool import EnvPool
from agent_envs.webshop.testing import write_mini_catalogue

{guard}
    cat = str(write_mini_catalogue(tempfile.mkdtemp()))
    pool = EnvPool("WebShop-Rubric-v0", {{"catalogue": cat, "verify": False, "tagger": "lexicon"}}, workers=1)
    try:
        pool.env_handle(0).reset(seed=0)
        print("RESET OK")
    except Exception as exc:
        print("ERROR", exc)
    finally:
        pool.close()
"""


@pytest.mark.parametrize("how", ["unguarded", "stdin", "guarded"])
def test_a_worker_killed_by_the_main_module_names_the_cause(tmp_path, how: str) -> None:
    """A spawned worker imports the main module again: an unguarded script starts the pool again
    in it (the worker exits with code 1), and a script from stdin cannot be read again; the error
    says so.  The guarded script is the control: it resets."""
    guard = 'if __name__ == "__main__":' if how == "guarded" else "if True:"
    script = SCRIPT.format(guard=guard)
    path = tmp_path / "train_script.py"
    path.write_text(script)
    run = _run(["-"], tmp_path, stdin=script) if how == "stdin" else _run([str(path)], tmp_path)
    out = run.stdout
    if how == "guarded":
        assert "RESET OK" in out, run.stdout + run.stderr
        return
    assert "ERROR" in out and "died: it exited with code 1" in out, run.stdout + run.stderr
    if how == "unguarded":
        assert f'{path} runs again inside it' in out and 'if __name__ == "__main__":' in out, out
    else:
        assert "'<stdin>' (a script piped into python?) cannot be read again" in out, out


def test_skip_messages_give_install_commands_not_the_projects_shared_folder() -> None:
    """A clone has no ``../shared``: no skip reason may send a user there."""
    import ast

    offenders = []
    for path in [ROOT / "conftest.py", *sorted((ROOT / "tests").rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("skip", "importorskip"):
                text = " ".join(c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str))
                if "shared" in text and "../shared" in text.replace("RUBRICGYM_SHARED", ""):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders
