"""A torn last line of metrics.jsonl (SIGKILL during an append, issue 14).

Before the fix, ``--resume`` opened the file in append mode and glued its next record onto
the fragment, and ``rubricgym report`` then failed on that line for good.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainers.metrics import MetricsLogger, read_metrics
from trainers.report import load_run

REPO = Path(__file__).resolve().parents[1]


def _torn_run(run_dir: Path) -> None:
    """Two whole records, then the first 17 bytes of a third (what a kill mid-write leaves)."""
    lines = [json.dumps({"update": 1, "phase": "train", "loss": 0.5}),
             json.dumps({"update": 1, "phase": "eval", "success": 0.25})]
    third = json.dumps({"update": 2, "phase": "train", "loss": 0.4})
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n" + third[:17])


def test_resume_drops_the_torn_line_with_a_warning(tmp_path, caplog):
    _torn_run(tmp_path)
    with caplog.at_level(logging.WARNING, logger="trainers.metrics"):
        logger = MetricsLogger(tmp_path, tensorboard=False)  # what --resume does
    assert "dropped a torn last line (17 bytes" in caplog.text
    logger.log(2, "train", {"loss": 0.4})
    logger.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    # 2 whole records + the new one, each on its own line (was: the new one glued on the fragment)
    assert [json.loads(x)["update"] for x in lines] == [1, 1, 2]
    run = load_run(tmp_path)  # what `rubricgym report` reads
    assert [r["update"] for r in run["train"]] == [1, 2] and run["eval"][0]["success"] == 0.25


def test_a_whole_last_record_without_newline_is_kept(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"update": 1, "phase": "train"}))
    MetricsLogger(tmp_path, tensorboard=False).log(2, "train", {})
    assert [r["update"] for r in read_metrics(tmp_path)] == [1, 2]


def test_report_reads_a_torn_or_glued_run(tmp_path, caplog):
    _torn_run(tmp_path)
    with caplog.at_level(logging.WARNING, logger="trainers.metrics"):
        assert [r["update"] for r in read_metrics(tmp_path)] == [1, 1]  # torn tail skipped
    assert "torn last line" in caplog.text
    # a run resumed by the old code: fragment + whole record on one line
    path = tmp_path / "metrics.jsonl"
    path.write_text(path.read_text() + json.dumps({"update": 2, "phase": "train", "loss": 0.4}) + "\n")
    assert [r["update"] for r in read_metrics(tmp_path)] == [1, 1, 2]
    # a corrupt line that is neither still names the file and the line
    path.write_text(path.read_text() + "garbage\n" + json.dumps({"update": 3, "phase": "train"}) + "\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl:4: not JSON"):
        read_metrics(tmp_path)


_WRITER = r"""
import sys
from trainers.metrics import MetricsLogger
logger = MetricsLogger(sys.argv[1], tensorboard=False)
big = "x" * 200_000  # big records: a kill often lands mid-write
sys.stdout.write("ready\n"); sys.stdout.flush()
u = 0
while True:
    u += 1
    logger.log(u, "train", {"pad": big})
"""


def test_sigkill_during_appends_then_resume(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path)], stdout=subprocess.PIPE, env=env)
    assert proc.stdout.readline() == b"ready\n"
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = [r["update"] for r in read_metrics(tmp_path)]  # readable whatever the kill left
    assert before == list(range(1, len(before) + 1))
    logger = MetricsLogger(tmp_path, tensorboard=False)
    logger.log(10**6, "train", {"resumed": True})
    records = read_metrics(tmp_path)
    assert [r["update"] for r in records] == before + [10**6]
    assert (tmp_path / "metrics.jsonl").read_bytes().endswith(b'"resumed": true}\n')
