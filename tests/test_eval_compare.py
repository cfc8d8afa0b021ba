"""What a model comparer reads off ``rubricgym eval``: token totals and cost, seconds per
decision and per episode, success/score/steps per task type, rubric rows with their unit, the
per-task files, ``--json``, and ``rubricgym eval compare`` (runs of one panel hash paired task by
task, with paired intervals), with hand-derived numbers and through the real CLI."""

from __future__ import annotations

import csv
import io
import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from agent_envs import panels
from agent_envs.panels import PanelSpec, resolve_panel
from trainers import stats
from trainers.cli import app
from trainers.evaluate.compare import compare_runs
from trainers.evaluate.folder import EpisodeResult, RunFolderError
from trainers.evaluate.summary import summarize, task_rows, tasks_csv

T3 = 3.182446305284263  # Student t, 0.975 quantile, 3 degrees of freedom


def _results():
    """Three episodes: two of type a with token counts and timings, one of type b from an
    older trace (no tokens, no timings)."""
    return [
        EpisodeResult(0, "t0", True, 1.0, 4, 0, False, "a", {"target_acquired": 2.0, "solved": 1.0}, None,
                      1000, 100, 2.0, [0.1, 0.2]),
        EpisodeResult(1, "t1", False, 0.5, 10, 2, True, "a", {"target_acquired": 1.0, "solved": 0.0}, None,
                      3000, 300, 4.0, [0.3, 0.4]),
        EpisodeResult(2, "t2", False, 0.0, 10, 5, True, "b", {"target_acquired": 0.0, "solved": 0.0}),
    ]


def test_the_summary_adds_tokens_cost_timings_types_and_units():
    panel = SimpleNamespace(name="p", hash="h" * 64, spec=SimpleNamespace(env_id="ALFWorld-Rubric-v0"))
    s = summarize(_results(), panel, prices=(0.5, 2.0), wall_s=12.3456, played=2)
    assert (s["prompt_tokens"], s["completion_tokens"], s["token_episodes"], s["tokens_per_episode"]) == (4000, 400, 2, 2200)
    assert s["cost_usd"] == pytest.approx((4000 * 0.5 + 400 * 2.0) / 1e6) == pytest.approx(0.0028)
    assert s["cost_per_episode_usd"] == pytest.approx(0.0014)
    assert s["price_per_1m_tokens"] == {"prompt": 0.5, "completion": 2.0}
    assert (s["decisions_timed"], s["latency_mean_s"], s["latency_p50_s"], s["latency_max_s"]) == (4, 0.25, 0.25, 0.4)
    assert s["latency_p95_s"] == pytest.approx(0.3 + 0.85 * 0.1)  # rank 0.95 * 3 = 2.85 between 0.3 and 0.4
    assert (s["episode_wall_mean_s"], s["wall_s"], s["played"]) == (3.0, 12.346, 2)
    assert (s["episodes/a"], s["success/a"], s["score/a"], s["steps/a"]) == (2, 0.5, 0.75, 7.0)
    assert (s["episodes/b"], s["success/b"], s["score/b"], s["steps/b"]) == (1, 0.0, 0.0, 10.0)
    assert (s["rubric/target_acquired"], s["rubric/solved"]) == (1.0, pytest.approx(1 / 3))
    assert s["units"] == {"rubric/target_acquired": "mean count", "rubric/solved": "share of episodes"}
    assert "cost_usd" not in summarize(_results(), panel)  # no prices, no cost
    assert json.loads(json.dumps(s, allow_nan=False)) == s


def test_the_per_task_rows_and_csv():
    rows = list(csv.DictReader(io.StringIO(tasks_csv(task_rows(_results(), (0.5, 2.0))))))
    assert list(rows[0])[-2:] == ["rubric/solved", "rubric/target_acquired"]
    assert rows[0] | {} == {"index": "0", "task_id": "t0", "task_type": "a", "success": "True", "score": "1.0",
                            "steps": "4", "invalid": "0", "truncated": "False", "error": "", "prompt_tokens": "1000",
                            "completion_tokens": "100", "cost_usd": "0.0007", "wall_s": "2.0",
                            "latency_mean_s": "0.15", "rubric/solved": "1.0", "rubric/target_acquired": "2.0"}
    assert (rows[2]["prompt_tokens"], rows[2]["cost_usd"], rows[2]["latency_mean_s"]) == ("", "", "")


# --- eval compare on hand-written run folders --------------------------------------------------
def _folder(path, name, episodes, hash_="a" * 64, tasks=4):
    header = {"panel": "p", "hash": hash_, "versions": {}, "tasks": tasks, "env_id": "ALFWorld-Rubric-v0",
              "env_kwargs": {}, "agent": {"name": name}, "settings": {}}
    (path / "episodes").mkdir(parents=True)
    (path / "run.json").write_text(json.dumps(header))
    for i, (success, score, steps, error) in enumerate(episodes):
        end = {"end": True, "index": i, "task_id": f"task-{i}", "success": success, "score": score, "steps": steps,
               "invalid": 0, "truncated": not success, "error": error}
        (path / "episodes" / f"{i:05d}.jsonl").write_text(json.dumps(end) + "\n")
    return path


BASE = [(True, 1.0, 5, None), (False, 0.2, 20, None), (True, 1.0, 7, None), (False, 0.4, 20, None)]
BETTER = [(True, 1.0, 4, None), (True, 1.0, 10, None), (True, 1.0, 6, None), (True, 1.0, 8, None)]


def test_compare_pairs_runs_task_by_task_with_paired_intervals(tmp_path):
    base, better = _folder(tmp_path / "base", "random", BASE), _folder(tmp_path / "better", "openai:m", BETTER)
    errored = _folder(tmp_path / "errored", "openai:m", BETTER[:3] + [(False, 0.0, 1, "APIConnectionError")])
    out = compare_runs([base, better, errored])
    first, second = out["comparisons"]
    assert (first["pairs"], first["unpaired"], first["only_run_solved"], first["only_baseline_solved"]) == (4, 0, 2, 0)
    success, score, steps = first["metrics"]
    sd = math.sqrt(1 / 3)  # differences 0, 1, 0, 1
    assert (success["baseline"], success["run"], success["diff"]) == (0.5, 1.0, 0.5)
    assert success["ci"] == pytest.approx([0.5 - T3 * sd / 2, 0.5 + T3 * sd / 2])
    assert success["sd"] == pytest.approx(sd) and success["mde"] == pytest.approx(stats.mde(sd, 4))
    assert score["diff"] == pytest.approx((0 + 0.8 + 0 + 0.6) / 4)
    sd = math.sqrt(34)  # steps differences -1, -10, -1, -12: mean -6, squares 25 + 16 + 25 + 36 over 3
    assert steps["diff"] == -6 and steps["ci"] == pytest.approx([-6 - T3 * sd / 2, -6 + T3 * sd / 2])
    assert (second["pairs"], second["unpaired"]) == (3, 1)  # the errored episode is no result
    assert [r["finished"] for r in out["runs"]] == [4, 4, 3] and out["runs"][2]["success"] == 1.0
    assert out["warnings"] == []
    huge = _folder(tmp_path / "huge", "m", BETTER, tasks=10**12)  # a header's task count is not trusted
    assert compare_runs([base, huge])["comparisons"][0]["pairs"] == 4


def test_compare_refuses_runs_of_other_panel_hashes_and_empty_pairings(tmp_path):
    base = _folder(tmp_path / "base", "random", BASE)
    other = _folder(tmp_path / "other", "random", BASE, hash_="b" * 64)
    with pytest.raises(RunFolderError, match=r"different panel hashes and cannot be paired.*base: p hash aaaaaaaaaaaa; "
                                             r".*other: p hash bbbbbbbbbbbb"):
        compare_runs([base, other])
    failed = _folder(tmp_path / "failed", "m", [(False, 0.0, 1, "boom")] * 4)
    with pytest.raises(RunFolderError, match="have no finished task in common"):
        compare_runs([base, failed])
    with pytest.raises(ValueError, match="two run folders or more"):
        compare_runs([base])
    with pytest.raises(RunFolderError, match="not an eval run folder"):
        compare_runs([base, tmp_path])


# --- the real CLI ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def panel(tmp_path_factory):
    """Four generated games (four task types) in a private cache folder, as a named panel."""
    cache = tmp_path_factory.mktemp("games")
    spec = PanelSpec("test-compare", "ALFWorld-Rubric-v0",
                     {"split": "generated", "generated_n": 4, "generated_seed": 0, "generated_cache_dir": str(cache)},
                     {}, "four generated games")
    return resolve_panel(spec)


class _Counting(BaseHTTPRequestHandler):
    """Answers ``look`` and reports 100 prompt and 7 completion tokens."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                           "usage": {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107},
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": "<action>look</action>"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _cli(monkeypatch, panel, *args):
    monkeypatch.setattr(panels, "PANELS", {panel.name: panel.spec})
    return CliRunner().invoke(app, list(args))


def test_help_of_eval_and_eval_compare():
    for args in (["eval", "-h"], ["eval", "--help"], ["eval", "compare", "-h"]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
    assert "--price-in" in CliRunner().invoke(app, ["eval", "-h"]).output
    assert "Usage: rubricgym eval compare [OPTIONS]" in CliRunner().invoke(app, ["eval", "compare", "-h"]).output


def test_the_cli_prints_json_writes_task_files_and_costs_tokens(panel, tmp_path, monkeypatch):
    pytest.importorskip("openai", reason="pip install 'rubricgym[eval]'")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        out = tmp_path / "m"
        res = _cli(monkeypatch, panel, "eval", panel.name, "--model", "openai:m", "--limit", "2", "--max-steps", "2",
                   "--base-url", f"http://127.0.0.1:{httpd.server_address[1]}/v1", "--price-in", "1.0",
                   "--price-out", "10.0", "--json", "-o", str(out))
    finally:
        httpd.shutdown()
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary == json.loads((out / "results.json").read_text())
    assert (summary["prompt_tokens"], summary["completion_tokens"]) == (2 * 2 * 100, 2 * 2 * 7)
    assert summary["cost_usd"] == pytest.approx((400 * 1.0 + 28 * 10.0) / 1e6)
    assert summary["decisions_timed"] == 4 and summary["latency_mean_s"] > 0
    rows = [json.loads(x) for x in (out / "tasks.jsonl").read_text().splitlines()]
    assert [r["cost_usd"] for r in rows] == pytest.approx([340e-6, 340e-6]) and [r["steps"] for r in rows] == [2, 2]
    table = list(csv.DictReader((out / "tasks.csv").open()))
    assert [r["task_id"] for r in table] == [r["task_id"] for r in rows] == list(panel.task_ids[:2])
    res = _cli(monkeypatch, panel, "eval", panel.name, "--model", "random", "--price-in", "1", "-o", str(out))
    assert res.exit_code == 2 and "give both --price-in and --price-out" in res.output


def test_the_cli_table_and_eval_compare_of_two_real_runs(panel, tmp_path, monkeypatch):
    walk, rand = tmp_path / "walk", tmp_path / "rand"
    res = _cli(monkeypatch, panel, "eval", panel.name, "--model", "walkthrough", "-o", str(walk))
    assert res.exit_code == 0, res.output
    assert "rubric/target_acquired (mean count)" in res.stdout and "per task type" in res.stdout
    assert "rubric/solved (share of episodes)" in res.stdout
    res = _cli(monkeypatch, panel, "eval", panel.name, "--model", "random", "--max-steps", "4", "-o", str(rand))
    assert res.exit_code == 0, res.output
    res = _cli(monkeypatch, panel, "eval", "compare", str(walk), str(rand), "--json")
    assert res.exit_code == 0, res.output
    (comp,) = json.loads(res.stdout)["comparisons"]
    assert "different settings" in json.loads(res.stdout)["warnings"][0]  # --max-steps 4 against none
    walk_steps = [json.loads(p.read_text().splitlines()[-1])["steps"] for p in sorted((walk / "episodes").iterdir())]
    assert (comp["pairs"], comp["only_baseline_solved"], comp["only_run_solved"]) == (4, 4, 0)
    success, _score, steps = comp["metrics"]
    assert (success["diff"], success["ci"], success["mde"]) == (-1.0, [-1.0, -1.0], 0.0)
    assert steps["diff"] == pytest.approx(4 - sum(walk_steps) / 4)
    res = _cli(monkeypatch, panel, "eval", "compare", str(walk), str(rand))
    assert res.exit_code == 0 and "#2 - #1: 4 tasks paired (0 unpaired)" in res.stdout and "MDE" in res.stdout
    header = json.loads((rand / "run.json").read_text())
    (rand / "run.json").write_text(json.dumps({**header, "hash": "0" * 64}))
    res = _cli(monkeypatch, panel, "eval", "compare", str(walk), str(rand))
    assert res.exit_code == 1 and "different panel hashes" in res.stderr and "Traceback" not in res.output
