"""Every snippet in the docs runs as printed, and every ``rubricgym`` command line parses.

* Each fenced ``python`` block of ``docs/**/*.md`` and ``README.md`` runs on its own: a fresh
  namespace, the current folder a new temporary one. A block that needs an optional engine
  which is not installed skips with the install command (under CI's strict skips that fails,
  since CI installs every extra). A block that must not run here (it downloads a model or needs
  a GPU) says so with ``<!-- skip-snippet -->`` on the line before its fence; there are few, and
  each of them is compiled instead.
* Running the commands would take hours, so each ``rubricgym ...`` command line of a shell
  block or an inline code span is checked against its subcommand's ``--help``: the subcommand
  exists and every flag it uses is one that ``--help`` lists; likewise each
  ``python bench/<script>.py ...`` line: the script exists and takes the flags shown.
* The how-to pages print the modules their tests (``tests/test_howto_*.py``) run.
"""

from __future__ import annotations

import re
import shlex
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP_MARK = "<!-- skip-snippet -->"
FENCE = re.compile(r"^(\s*)```(\w*)[^\n]*$")
#: Optional modules and the install command that brings each.
INSTALL = {
    "alfworld": ".[alfworld]", "textworld": ".[alfworld]", "fast_downward": ".[alfworld]",
    "bm25s": ".[webshop]", "Stemmer": ".[webshop]", "flask": ".[webshop]", "gunicorn": ".[webshop]",
    "spacy": ".[webshop]", "requests": ".[webshop]", "selenium": ".[browser]",
    "torch": ".[train]", "transformers": ".[train]", "peft": ".[train]", "accelerate": ".[train]",
    "trl": ".[trl]", "skyrl_gym": ".[skyrl]", "openrlhf": ".[openrlhf]", "ray": ".[ray]",
    "openai": ".[eval]", "sentence_transformers": ".[scpo]", "verl": ".[verl]",
    "openenv": ".[openenv]",
}


def _documents() -> list[Path]:
    return sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]


def _blocks(path: Path) -> list[tuple[int, str, str, bool]]:
    """``(line, language, code, skip)`` of every fenced block of ``path``."""
    out, lines, i = [], path.read_text(encoding="utf-8").splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang, start = len(m.group(1)), m.group(2).lower(), i
        prev = next((x.strip() for x in reversed(lines[:i]) if x.strip()), "")
        i += 1
        body = []
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        out.append((start + 1, lang, "\n".join(body) + "\n", prev == SKIP_MARK))
        i += 1
    return out


def _python_blocks(*, marked: bool = False) -> list:
    """The python blocks to run (``marked=False``) or those marked not to run (``marked=True``;
    no test is skipped for them: CI counts a skip as a failure, and they are compiled instead)."""
    params = []
    for path in _documents():
        for line, lang, code, skip in _blocks(path):
            if lang in ("python", "py") and skip == marked:
                rel = f"{path.relative_to(ROOT)}:{line}"
                params.append(pytest.param(rel, code, id=rel))
    return params


def test_the_documents_have_snippets() -> None:
    assert len(_python_blocks()) >= 20
    assert len(_python_blocks(marked=True)) <= 10, "few snippets may be marked not to run"


@pytest.mark.parametrize(("where", "code"), _python_blocks(marked=True))
def test_a_snippet_marked_not_to_run_still_compiles(where: str, code: str) -> None:
    compile(code, where, "exec")


@pytest.mark.parametrize(("where", "code"), _python_blocks())
def test_python_snippet_runs_as_printed(where: str, code: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    compiled = compile(code, where, "exec")
    try:
        exec(compiled, {"__name__": "__main__"})  # noqa: S102 - the documents' own examples
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top in INSTALL:
            pytest.skip(f"{where} needs {top}: pip install -e \"{INSTALL[top]}\"")
        raise


# ---- command lines -------------------------------------------------------------------------

_PREFIXES = re.compile(r"^(?:\$\s+|(?:[A-Z_][A-Z0-9_]*=\S*\s+)+|/usr/bin/time(?:\s+-v)?\s+|"
                       r"nice(?:\s+-n\s*\d+)?\s+|timeout\s+\d+\s+|env\s+)+")


def _command_lines(text: str, shell: bool) -> list[str]:
    """The ``rubricgym ...`` commands of a shell block (``shell``) or of inline code spans."""
    if shell:
        text = re.sub(r"\\\n\s*", " ", text)
        pieces = [p for line in text.splitlines() if not line.lstrip().startswith("#")
                  for p in re.split(r"&&|\|\||;|\|", line.split(" #")[0])]
    else:
        pieces = re.findall(r"`([^`\n]+)`", text)
    out = []
    for piece in pieces:
        cmd = _PREFIXES.sub("", piece.strip())
        if re.match(r"rubricgym\s", cmd):
            out.append(cmd)
    return out


def _commands() -> list:
    found: dict[str, str] = {}
    for path in _documents():
        text = path.read_text(encoding="utf-8")
        spans = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
        lines = [c for _, lang, code, _ in _blocks(path) if lang in ("bash", "sh", "shell", "console")
                 for c in _command_lines(code, shell=True)]
        for cmd in lines + _command_lines(spans, shell=False):
            found.setdefault(cmd, str(path.relative_to(ROOT)))
    return [pytest.param(cmd, where, id=f"{where}: {cmd[:70]}") for cmd, where in found.items()]


@cache
def _cli():
    import typer.main

    from trainers.cli import app

    return app, typer.main.get_command(app)


@cache
def _help(path: tuple[str, ...]) -> str:
    from typer.testing import CliRunner

    app, _ = _cli()
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "250", "TERMINAL_WIDTH": "250"})
    assert result.exit_code == 0, f"rubricgym {' '.join(path)} --help failed:\n{result.output}"
    return result.output


def _tokens(cmd: str) -> list[str]:
    try:
        tokens = shlex.split(cmd)
    except ValueError:
        tokens = cmd.split()
    return [t.strip("[]") for t in tokens]


def _subcommand(tokens: list[str]) -> tuple[tuple[str, ...], list[str]]:
    _, group = _cli()
    path, i = [], 1
    while i < len(tokens) and tokens[i] in getattr(group, "commands", {}):
        group = group.commands[tokens[i]]
        path.append(tokens[i])
        i += 1
    return tuple(path), tokens[i:]


def test_the_documents_have_commands() -> None:
    assert len(_commands()) >= 15


@pytest.mark.parametrize(("cmd", "where"), _commands())
def test_rubricgym_command_parses(cmd: str, where: str) -> None:
    path, rest = _subcommand(_tokens(cmd))
    assert path, f"{where}: {cmd!r} names no rubricgym subcommand"
    known = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w.-]*)", _help(path)))
    flags = [t.split("=")[0] for t in rest if t.startswith("-") and t not in ("-", "--")
             and not re.fullmatch(r"-\d[\d.]*", t)]
    unknown = [f for f in flags if f not in known and not re.fullmatch(r"--[A-Z_]+", f)]
    assert not unknown, f"{where}: `{cmd}`: `rubricgym {' '.join(path)} --help` has no {unknown}"


# ---- the how-tos: the pages print the code their tests run -----------------------------------

def _howto_blocks(name: str) -> list[str]:
    return [code for _, lang, code, _ in _blocks(ROOT / "docs/howto" / name) if lang == "python"]


def _test_module(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_howto_{name}", ROOT / "tests" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_estimator_howto_prints_its_tests_module_and_runs_in_order() -> None:
    from wrappers.credit import unregister_estimator

    blocks = _howto_blocks("estimator.md")
    assert blocks[0].strip() == _test_module("test_howto_estimator").TOY.strip()
    namespace: dict = {"__name__": "toy_centred"}
    try:
        exec(compile(blocks[0], "docs/howto/estimator.md: the module", "exec"), namespace)  # noqa: S102
        exec(compile(blocks[1], "docs/howto/estimator.md: its test", "exec"), namespace)  # noqa: S102
        namespace["test_toy_centred"]()
    finally:
        unregister_estimator("toy_centred")


def test_the_adapter_howto_prints_its_tests_module_and_runs_in_order(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = _howto_blocks("adapter.md")
    assert blocks[0].strip() == _test_module("test_howto_adapter").ADAPTER.strip()
    namespace: dict = {"__name__": "__main__"}
    for i, code in enumerate(blocks[:3]):
        exec(compile(code, f"docs/howto/adapter.md: block {i + 1}", "exec"), namespace)  # noqa: S102
    assert [t.success for t in namespace["group"]] == [True, False]
    advantages = [a.round(3).tolist() for a in namespace["credit"].advantages]
    assert advantages == [[0.866, 0.866], [-0.874, -0.858]]


def test_the_environment_howto_prints_its_tests_module() -> None:
    """The page's module is the one ``tests/test_howto_environment.py`` registers, checks and
    evaluates; the page's check is the script that test runs."""
    blocks = _howto_blocks("environment.md")
    test = _test_module("test_howto_environment")
    assert blocks[0].strip() == test.MODULE.strip()
    check = [line for line in blocks[1].splitlines() if line.strip()]
    assert all(line in test.SCRIPT for line in check if not line.startswith("import agent_envs")), check


# ---- bench scripts: `python bench/<script>.py --flags` ------------------------------------

def _bench_lines(text: str, shell: bool) -> list[str]:
    if shell:
        text = re.sub(r"\\\n\s*", " ", text)
        pieces = [p for line in text.splitlines() for p in re.split(r"&&|\|\||;|\|", line.split(" #")[0])]
    else:
        pieces = re.findall(r"`([^`\n]+)`", text)
    out = []
    for piece in pieces:
        cmd = _PREFIXES.sub("", piece.strip())
        if re.match(r"python\s+bench/\w+\.py\b", cmd):
            out.append(cmd)
    return out


def _bench_commands() -> list:
    found: dict[str, str] = {}
    for path in _documents():
        text = path.read_text(encoding="utf-8")
        spans = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
        lines = [c for _, lang, code, _ in _blocks(path) if lang in ("bash", "sh", "shell", "console")
                 for c in _bench_lines(code, shell=True)]
        for cmd in lines + _bench_lines(spans, shell=False):
            found.setdefault(cmd, str(path.relative_to(ROOT)))
    return [pytest.param(cmd, where, id=f"{where}: {cmd[:70]}") for cmd, where in found.items()]


@cache
def _bench_help(script: str) -> str:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False, env={**__import__("os").environ, "COLUMNS": "250"})
    assert proc.returncode == 0, f"python {script} --help failed:\n{proc.stderr[-2000:]}"
    return proc.stdout


@pytest.mark.parametrize(("cmd", "where"), _bench_commands())
def test_bench_command_parses(cmd: str, where: str) -> None:
    tokens = _tokens(cmd)
    script = tokens[1]
    assert (ROOT / script).is_file(), f"{where}: {script} does not exist"
    flags = [t.split("=")[0] for t in tokens[2:] if t.startswith("-") and not re.fullmatch(r"-\d[\d.]*", t)]
    if not flags:
        return  # a script without options (some take none, and no --help either)
    known = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w.-]*)", _bench_help(script)))
    unknown = [f for f in flags if f not in known]
    assert not unknown, f"{where}: `{cmd}`: `python {script} --help` has no {unknown}"
