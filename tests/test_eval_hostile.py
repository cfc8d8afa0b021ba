"""``rubricgym eval`` against what breaks a harness: replies that are no chat completion (a real
HTTP server on loopback, the real ``openai`` client), a reply of 20 MiB, and damaged run
folders.  Each fails one episode (or one decision) or the folder, with the reason, never the run
with a traceback."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent_envs.panels import PanelSpec, resolve_panel
from trainers.evaluate.agents import make_agent
from trainers.evaluate.runner import EvalSettings, RunFolderError, evaluate, summarize

HUGE = 20 * 2**20  # characters of the huge reply


@pytest.fixture(scope="module")
def panel(tmp_path_factory):
    """Two generated games in a private cache folder."""
    cache = tmp_path_factory.mktemp("games")
    spec = PanelSpec("test-hostile", "ALFWorld-Rubric-v0",
                     {"split": "generated", "generated_n": 2, "generated_seed": 0, "generated_cache_dir": str(cache)},
                     {}, "two generated games")
    return resolve_panel(spec)


def _completion(message, usage=None):
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": message}]}
    if usage is not None:
        body["usage"] = usage
    return body


#: case -> (content type, body); the case is the first part of the request's path.
REPLIES = {
    "badjson": ("application/json", b'{"id": "x", "choices": [{"message": {"role": "assist'),
    "nullmessage": ("application/json", json.dumps(_completion(None)).encode()),
    "html": ("text/html; charset=utf-8", b"<!DOCTYPE html><html><body><h1>Welcome to nginx!</h1></body></html>"),
    "error200": ("application/json", b'{"error": {"message": "model not loaded"}}'),
    "nofunction": ("application/json", json.dumps(_completion(
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_0", "type": "function"}]})).encode()),
    "huge": ("application/json", json.dumps(_completion(
        {"role": "assistant", "content": "<action>look</action>" + "x" * (HUGE - 21)})).encode()),
}


class _Hostile(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        kind, body = REPLIES[self.path.split("/")[1]]
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def _play(panel, out, case, url, **settings):
    pytest.importorskip("openai", reason="pip install 'rubricgym[eval]'")
    agent = make_agent("openai:m", env_id="x", env_kwargs={}, reset_options={}, base_url=f"{url}/{case}/v1",
                       retries=0, timeout=30, action_format=settings.get("action_format", "text"))

    async def main():
        try:
            return await evaluate(panel, agent, out, EvalSettings(**settings))
        finally:
            await agent.aclose()

    return asyncio.run(main())


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.parametrize(("case", "reason"), [
    ("badjson", r"the reply \(HTTP 200, application/json\) is not JSON: .*it begins '\{\"id\": \"x\""),
    ("nullmessage", r"the reply's choices\[0\]\.message is null, not a message object"),
    ("html", r"the reply \(HTTP 200, text/html\) is not JSON \(a web page: does --base-url name the API root"),
    ("error200", (r"the reply is not a chat completion \(no choices list; keys \['error'\], error \{\"message\": "
                 r"\"model not loaded\"\}\)")),
])
def test_a_reply_that_is_no_chat_completion_fails_its_episode_and_the_run_goes_on(panel, server, tmp_path, case,
                                                                                  reason):
    results = _play(panel, tmp_path / case, case, server, max_steps=2, concurrency=1)
    assert len(results) == 2 and all(r.error is not None for r in results)
    assert all(f"{server}/{case}/v1: " in r.error for r in results)
    assert re.search(reason, results[0].error), results[0].error
    end = _lines(tmp_path / case / "episodes" / "00001.jsonl")[-1]
    assert end["end"] and end["error"] == results[1].error
    summary = json.loads((tmp_path / case / "results.json").read_text())
    assert (summary["episodes"], summary["errors"]) == (2, 2) == (len(results), summarize(results, panel)["errors"])


def test_a_tool_call_without_a_function_is_an_invalid_action_with_its_reason(panel, server, tmp_path):
    (r,) = _play(panel, tmp_path / "t", "nofunction", server, max_steps=3, limit=1, action_format="tools")
    assert (r.error, r.steps, r.invalid) == (None, 3, 3)
    lines = _lines(tmp_path / "t" / "episodes" / "00000.jsonl")
    assert [x["problem"] for x in lines[:3]] == ["the tool call has no function"] * 3
    assert all(x["action"] == "<no action>" and not x["valid"] for x in lines[:3])
    assert json.loads(lines[0]["reply"]) == {"tool_call": {"id": "call_0", "type": "function"}}


def test_a_20_mib_reply_is_stored_clipped_with_its_length(panel, server, tmp_path):
    (r,) = _play(panel, tmp_path / "h", "huge", server, max_steps=3, limit=1)
    assert (r.error, r.steps, r.invalid) == (None, 3, 0)  # the action at its start still counts
    path = tmp_path / "h" / "episodes" / "00000.jsonl"
    lines = _lines(path)
    marker = f"[... truncated: {HUGE} characters in all]"
    assert all(x["reply"] == "<action>look</action>" + "x" * (32768 - 21) + marker for x in lines[:3])
    assert path.stat().st_size < 3 * 50_000  # not 3 x 20 MiB
    short = EvalSettings(max_steps=1, limit=1, trace_chars=100)
    asyncio.run(_evaluate_with(panel, server, tmp_path / "short", short))
    (line, _end) = _lines(tmp_path / "short" / "episodes" / "00000.jsonl")
    assert line["reply"] == "<action>look</action>" + "x" * 79 + marker
    assert all(len(m["content"]) <= 100 + len(" [... truncated: 99999 characters in all]") for m in line["messages"])


async def _evaluate_with(panel, url, out, settings):
    agent = make_agent("openai:m", env_id="x", env_kwargs={}, reset_options={}, base_url=f"{url}/huge/v1", retries=0)
    try:
        return await evaluate(panel, agent, out, settings)
    finally:
        await agent.aclose()


# --- damaged run folders ---------------------------------------------------------------------------
def _random(panel, out, **settings):
    async def main():
        agent = make_agent("random", env_id="x", env_kwargs={}, reset_options={})
        seen = []
        done = await evaluate(panel, agent, out, EvalSettings(max_steps=2, **settings),
                              on_episode=lambda r, resumed: seen.append((r.index, resumed)))
        return done, seen

    return asyncio.run(main())


@pytest.fixture(scope="module")
def played(panel, tmp_path_factory):
    out = tmp_path_factory.mktemp("played") / "run"
    results, _ = _random(panel, out)
    return out, results


def _end_with(path, **changes):
    lines = path.read_text().splitlines()
    lines[-1] = json.dumps({**json.loads(lines[-1]), **changes})
    path.write_text("\n".join(lines) + "\n")


DAMAGES = {
    "binary episode": (lambda out: (out / "episodes" / "00000.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00"),
                       r"00000\.jsonl: not UTF-8 text \(binary bytes at offset 0\); delete it to play the episode again"),
    "binary run.json": (lambda out: (out / "run.json").write_bytes(b"\xff\xfe{}"),
                        r"run\.json: not UTF-8 text .*; restore it, or use another folder"),
    "run.json holds []": (lambda out: (out / "run.json").write_text("[]"),
                          r"run\.json: holds a JSON list, not a run header \(an object\)"),
    "run.json unknown field": (lambda out: (out / "run.json").write_text(json.dumps(
        {**json.loads((out / "run.json").read_text()), "shards": 4})), r"run\.json: unknown fields \['shards'\]"),
    "end line unknown field": (lambda out: _end_with(out / "episodes" / "00001.jsonl", reward_model="rm-7b"),
                               r"00001\.jsonl: unknown fields \['reward_model'\] in the end line"),
    "end line wrong type": (lambda out: _end_with(out / "episodes" / "00001.jsonl", steps="2"),
                            r"00001\.jsonl: a damaged end line \(missing \[\], wrong type \['steps'\]\)"),
    "end line of another episode": (lambda out: _end_with(out / "episodes" / "00001.jsonl", index=0),
                                    r"00001\.jsonl: the end line is episode 0's, not 1's"),
    "end line holds a list": (lambda out: (out / "episodes" / "00000.jsonl").write_text("[1, 2]\n"),
                              r"00000\.jsonl: the last line holds a JSON list, not a record"),
    "episode path is a folder": (lambda out: ((out / "episodes" / "00001.jsonl").unlink(),
                                              (out / "episodes" / "00001.jsonl").mkdir()),
                                 r"00001\.jsonl: not a trace file \(a folder or another non-file\)"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_run_folder_is_refused_naming_the_file_and_left_untouched(panel, played, tmp_path, damage):
    out = tmp_path / "run"
    shutil.copytree(played[0], out)
    spoil, message = DAMAGES[damage]
    spoil(out)
    before = {p.relative_to(out): (p.read_bytes() if p.is_file() else None) for p in out.rglob("*")}
    with pytest.raises(RunFolderError, match=message):
        _random(panel, out)
    assert before == {p.relative_to(out): (p.read_bytes() if p.is_file() else None) for p in out.rglob("*")}


def test_the_cli_reports_a_damaged_folder_in_one_line(panel, played, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from agent_envs import panels
    from trainers.cli import app

    monkeypatch.setattr(panels, "PANELS", {panel.name: panel.spec})
    out = tmp_path / "run"
    shutil.copytree(played[0], out)
    (out / "run.json").write_text("[]")
    res = CliRunner().invoke(app, ["eval", panel.name, "--model", "random", "--max-steps", "2", "-o", str(out)])
    assert res.exit_code == 1, res.output
    assert "holds a JSON list, not a run header" in res.stderr and "Traceback" not in res.output


def test_traces_written_before_the_timings_and_token_sums_still_resume(panel, played, tmp_path):
    """An older trace: no latency_s/usage sums in its lines and end line (the format before
    them); resuming counts it finished, and its token sums come from its lines' usage."""
    out = tmp_path / "run"
    shutil.copytree(played[0], out)
    for i in range(2):
        path = out / "episodes" / f"{i:05d}.jsonl"
        lines = _lines(path)
        new = ("latency_s", "wall_s", "prompt_tokens", "completion_tokens")
        old = [{k: v for k, v in x.items() if k not in new} for x in lines]
        old[0]["usage"] = {"prompt_tokens": 120, "completion_tokens": 9} if i == 1 else {}
        path.write_text("".join(json.dumps(x) + "\n" for x in old))
    again, seen = _random(panel, out)
    assert sorted(seen) == [(0, True), (1, True)] and again[0] == played[1][0]
    assert again[1] == replace(played[1][1], prompt_tokens=120, completion_tokens=9)
    assert again[0].latency_s == [] and again[0].wall_s is None
