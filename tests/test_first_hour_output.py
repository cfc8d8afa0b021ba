"""Off a terminal a long command still says what it is doing: one log line per phase of
``rubricgym train`` and per N generated games, shown by the CLI without ``-v``."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import logging, sys
from trainers import cli

@cli.app.command("probe-progress")
def probe() -> None:
    logging.getLogger("agent_envs.alfworld.generator.cache").info("GAMES LINE")
    logging.getLogger("trainers.trainer").info("PHASE LINE")
    logging.getLogger("agent_envs.webshop.server").info("SERVER INFO LINE")
    logging.getLogger("some_library").info("LIBRARY INFO LINE")
    logging.getLogger("some_library").warning("LIBRARY WARNING LINE")

sys.argv = ["rubricgym", *sys.argv[1:], "probe-progress"]
cli.main()
"""


def _probe(*flags: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-c", PROBE, *flags], capture_output=True, text=True, env=env, timeout=300,
                         check=True)
    return run.stderr


def test_the_cli_shows_progress_lines_without_v() -> None:
    err = _probe()
    assert "GAMES LINE" in err and "PHASE LINE" in err and "LIBRARY WARNING LINE" in err
    assert "SERVER INFO LINE" not in err and "LIBRARY INFO LINE" not in err  # other INFO stays quiet
    err = _probe("-v")
    assert "SERVER INFO LINE" in err and "LIBRARY INFO LINE" in err


def test_training_phases_are_log_lines_off_a_terminal(caplog) -> None:
    from rich.console import Console

    from trainers.trainer import _Progress

    with caplog.at_level(logging.INFO, logger="trainers.trainer"):
        progress = _Progress(enabled=True, total=2, start=0, console=Console(file=io.StringIO()))
        progress.phase("validation before training (2 tasks)")
        progress.phase("update 1: rollouts, credit, optimizer")
        progress.advance(0.25, 0.5)
        progress.close()
    assert [r.getMessage() for r in caplog.records] == [
        "train: validation before training (2 tasks)", "train: update 1: rollouts, credit, optimizer",
        "train: 1/2 updates done · train success 0.25 · val 0.50"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="trainers.trainer"):
        quiet = _Progress(enabled=False, total=2, start=0)
        quiet.phase("x")
        quiet.advance(0.0, None)
    assert caplog.records == []  # progress=false: nothing


def test_game_generation_logs_every_nth_game_off_a_terminal(caplog) -> None:
    from agent_envs.alfworld.generator.cache import _Progress

    with caplog.at_level(logging.INFO, logger="agent_envs.alfworld.generator.cache"):
        progress = _Progress(60, "generating", None)
        for k in range(1, 61):
            progress.advance(k)
        progress.close()
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "generating: 60 game(s) to build and verify"
    assert [line.split(" verified")[0] for line in lines[1:]] == [f"generating: {k}/60" for k in range(6, 61, 6)]
