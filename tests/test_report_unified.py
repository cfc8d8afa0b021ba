"""One metrics schema, one ``rubricgym report``: a trainer run and an arena comparison in one
folder are reported in one table with the numbers of their own metric files, and each side's
reader reads the other's run folders."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from trainers.arena.config import ArenaConfig
from trainers.arena.pool import run_arena
from trainers.arena.report import RunMetrics
from trainers.arena.report import load_run as arena_load_run
from trainers.cli import app
from trainers.config import load_config
from trainers.metrics import format_record, read_metrics, run_identity
from trainers.report import (
    find_runs,
    load_run,
    summarize,
    summary_text,
    write_markdown,
    write_run_report,
)
from trainers.stats import mde
from trainers.trainer import Trainer

# the fast trainer configuration of tests/test_trainer_e2e.py (tiny random model, 1 update, WebShop)
TRAINER = [
    "model=tiny-llama", "groups_per_update=2", "group_size=2", "val_tasks=2", "updates=1", "eval_every=1",
    "save_every=1", "learning_rate=1e-3", "progress=false", "tensorboard=false", "max_response_tokens=12",
    "micro_batch_rows=4", "estimator_params={}", "skip_zero_advantage_rows=false", "env_workers=0",
    "mixed_precision=no", "rubric_shaping=0.0", "max_train_rows=0", "torch_threads=1", "warm_start_tasks=0",
    "trainable_layers=0", "eval_train_games=false", "save_rollouts=false", "estimator=grpo",
    "env_id=WebShop-Rubric-v0", "env_kwargs={catalogue: generated, num_products: 120, tagger: lexicon}",
    "train_split=train", "val_split=eval", "max_steps=4",
]
ARENA = dict(updates=2, tasks_per_update=2, group_size=4, train_tasks=4, val_tasks=4, eval_every=1, epochs=1,
             minibatch=16)


def _raw(run_dir: Path) -> list[dict]:
    """The metric file's records, read without the report's code."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _own_numbers(records: list[dict]) -> dict[str, float]:
    """L5, normalised AUC and final success from a run's eval records, computed here."""
    ev = sorted({r["update"]: r for r in records if r["phase"] == "eval"}.values(), key=lambda r: r["update"])
    ups = np.array([r["update"] for r in ev], dtype=float)
    succ = np.array([r["success"] for r in ev], dtype=float)
    return {"L5": float(succ[ups > 0][-5:].mean()), "AUC": float(np.trapezoid(succ, ups) / (ups[-1] - ups[0])),
            "final": float(succ[-1]), "success": [float(s) for s in succ]}


def _table(md: str) -> dict[str, list[str]]:
    """The first table's rows by their first cell (the method label)."""
    rows: dict[str, list[str]] = {}
    for line in md.splitlines():
        if line.startswith("| ") and not line.startswith("| method") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows.setdefault(cells[0], cells[1:])
    return rows


@pytest.mark.slow
def test_one_report_reads_trainer_and_arena_runs_alike(tmp_path: Path) -> None:
    summary = Trainer(load_config("demo", [*TRAINER, f"output_dir={tmp_path / 'train'}", "run_name=grpo-s0"])).train()
    trainer_dir = Path(summary["run_dir"])
    run_arena(ArenaConfig.for_env("webshop", **ARENA), ["grpo", "rloo"], [0, 1], tmp_path / "arena", workers=1)
    arena_dirs = {(m, s): tmp_path / "arena" / "runs" / f"{m}__seed{s}" for m in ("grpo", "rloo") for s in (0, 1)}

    # --- both writers wrote the one schema, with the same names for the same things
    t_recs, a_recs = _raw(trainer_dir), _raw(arena_dirs[("grpo", 0)])
    assert [r["phase"] for r in t_recs] == ["run", "eval", "train", "eval", "end"]
    assert [r["phase"] for r in a_recs] == ["run", "eval", "train", "eval", "train", "eval", "end"]
    for recs in (t_recs, a_recs):
        assert all(list(r)[:2] == ["update", "phase"] for r in recs)
    t_run, a_run = t_recs[0], a_recs[0]
    assert (t_run["source"], t_run["env"], t_run["method"], t_run["seed"]) == ("trainer", "WebShop-Rubric-v0", "grpo", 0)
    assert (a_run["source"], a_run["env"], a_run["method"], a_run["seed"]) == ("arena", "webshop", "grpo", 0)
    identity = {"schema", "source", "env", "estimator", "variant", "method", "seed", "config"}
    assert identity <= set(t_run) and identity <= set(a_run)
    shared_eval = {"success", "score", "invalid_rate", "mean_steps", "episodes", "success/webshop", "eval_s"}
    shared_train = {"train/success", "train/score", "train/mean_steps", "train/invalid_rate", "train/episodes",
                    "opt/loss", "opt/pg_loss", "opt/kl", "opt/delta_norm", "opt/epochs_run", "opt/adv_rms",
                    "opt/rows", "opt/pairs", "credit/credit_s", "rollout/rollout_s", "time/update_s"}
    for recs in (t_recs, a_recs):
        assert shared_eval <= set(next(r for r in recs if r["phase"] == "eval"))
        assert shared_train <= set(next(r for r in recs if r["phase"] == "train"))
        assert {"seconds", "cpu_seconds"} <= set(recs[-1])

    # --- one report of the whole folder: both kinds of run, each with its own numbers
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = _table(result.output)
    assert rows == _table((tmp_path / "results.md").read_text())
    report = json.loads((tmp_path / "results.json").read_text())
    t_own = _own_numbers(t_recs)
    assert t_own["L5"] == pytest.approx(summary["L5"]) and t_own["AUC"] == pytest.approx(summary["normalized_auc"])
    t_setting = report["methods"][next(k for k, e in report["methods"].items() if e["source"] == "trainer")]["setting"]
    t_row = rows[f"grpo@{t_setting}"]  # grpo runs in two settings: the labels name them
    assert t_row[:3] == [f"{100 * t_own[k]:.1f}" for k in ("L5", "AUC", "final")]  # one seed: no SD
    assert t_row[6] == "1" and t_row[-3:] == ["WebShop-Rubric-v0", "trainer", t_setting]
    a_own = {k: _own_numbers(_raw(d)) for k, d in arena_dirs.items()}
    a_setting = report["methods"]["rloo"]["setting"]
    assert a_setting != t_setting
    for method, label in (("grpo", f"grpo@{a_setting}"), ("rloo", "rloo")):
        for key, cell in (("L5", 0), ("AUC", 1), ("final", 2)):
            vals = [a_own[(method, s)][key] for s in (0, 1)]
            assert rows[label][cell] == f"{100 * np.mean(vals):.1f} ± {100 * np.std(vals, ddof=1):.1f}"
            assert report["methods"][label][key]["per_seed"] == pytest.approx(vals)
        for s in (0, 1):  # the arena's own end record agrees
            end = _raw(arena_dirs[(method, s)])[-1]
            assert end["readouts"]["L5"] == pytest.approx(a_own[(method, s)]["L5"])
        assert rows[label][6] == "2" and rows[label][-3:] == ["webshop", "arena", a_setting]
    # the paired comparison within the arena's setting (seeds 0 and 1 pair up); none for the trainer run
    diffs = [a_own[("rloo", s)]["L5"] - a_own[("grpo", s)]["L5"] for s in (0, 1)]
    paired = report["paired"]["rloo"]
    assert paired["baseline"] == f"grpo@{a_setting}" and paired["L5"]["n"] == 2
    assert paired["L5"]["mean"] == pytest.approx(np.mean(diffs))
    sd = float(np.std(diffs, ddof=1))
    assert paired["L5"]["sd"] == pytest.approx(sd, abs=1e-12)
    assert (paired["L5"]["mde"] == pytest.approx(mde(sd, 2))) if sd > 0 else paired["L5"]["mde"] == 0.0
    line = next(x for x in result.output.splitlines() if x.startswith(f"| rloo | grpo@{a_setting} |"))
    assert line.split("|")[3].strip() == f"{100 * np.mean(diffs):+.1f}"
    assert set(report["paired"]) == {"rloo"}
    assert (tmp_path / "curves.png").stat().st_size > 1000

    # --- the trainer-side reader and per-run report on an arena run folder
    arun = load_run(arena_dirs[("grpo", 0)])
    assert (arun["source"], arun["method"], arun["seed"], arun["env"], arun["complete"]) == ("arena", "grpo", 0, "webshop", True)
    assert [e["success"] for e in arun["eval"]] == a_own[("grpo", 0)]["success"]
    assert [r["train/success"] for r in arun["train"]] == [r["train/success"] for r in a_recs if r["phase"] == "train"]
    assert [r["phase"] for r in read_metrics(arena_dirs[("grpo", 0)])] == [r["phase"] for r in a_recs]
    text = summary_text(arun)
    assert "validation success by update: " + ", ".join(
        f"{u}: {s:.3f}" for u, s in enumerate(a_own[("grpo", 0)]["success"])) in text
    # two evaluations after update 0: the L5 line names what it averaged
    n_after = len(a_own[("grpo", 0)]["success"]) - 1
    assert n_after == 2 and "L5 (mean of the last five" not in text
    assert (f"mean validation success of the 2 evaluation(s) after update 0 (L5 would average five): "
            f"{a_own[('grpo', 0)]['L5']:.3f}") in text
    png, _ = write_run_report(arena_dirs[("grpo", 0)])
    assert png.stat().st_size > 1000

    # --- the arena-side reader on the trainer's run folder
    trun = arena_load_run(trainer_dir)
    assert (trun["source"], trun["method"], trun["seed"], trun["complete"]) == ("trainer", "grpo", 0, True)
    assert [e["success"] for e in trun["eval"]] == t_own["success"]
    assert trun["readouts"]["L5"] == pytest.approx(summary["L5"])
    assert RunMetrics("grpo", 0, evals=trun["eval"]).readouts() == trun["readouts"]

    # --- an older trainer folder (no run / end record): identity from config.yaml, same setting
    old = tmp_path / "old" / "grpo-s0"
    old.mkdir(parents=True)
    for name in ("config.yaml", "summary.json"):
        shutil.copy(trainer_dir / name, old / name)
    (old / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in t_recs if r["phase"] not in ("run", "end")))
    orun = load_run(old)
    assert (orun["source"], orun["method"], orun["seed"], orun["setting"], orun["complete"]) == (
        "trainer", "grpo", 0, t_setting, True)
    assert all(math.isclose(orun["readouts"][k], v) or (math.isnan(v) and math.isnan(orun["readouts"][k]))
               for k, v in load_run(trainer_dir)["readouts"].items())


def _fake_run(d: Path, method: str, seed: int, success: list[float], *, config: dict | None = None,
              end: bool = True) -> None:
    """A run folder as the trainer writes one (the schema of trainers.metrics)."""
    d.mkdir(parents=True)
    est, _, var = method.partition(":")
    lines = [format_record(0, "run", run_identity("trainer", "E-v0", est, var, seed, config or {"updates": 2}))]
    for u, s in enumerate(success):
        lines.append(format_record(u, "eval", {"success": s, "score": s}))
        if u:
            lines.append(format_record(u, "train", {"train/success": s, "credit/stat_pairs": float(u)}))
    if end:
        lines.append(format_record(len(success) - 1, "end", {"seconds": 1.0, "cpu_seconds": 0.5}))
    (d / "metrics.jsonl").write_text("".join(lines))


def test_runs_group_by_setting_and_pair_only_within_one(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _fake_run(a / "grpo0", "grpo", 0, [0.0, 0.2, 0.4])
    _fake_run(a / "grpo1", "grpo", 1, [0.0, 0.0, 0.2])
    _fake_run(a / "mc0", "mcgpo", 0, [0.0, 0.4, 0.6])
    _fake_run(a / "mc1", "mcgpo", 1, [0.0, 0.2, 0.4])
    _fake_run(b / "mc0", "mcgpo", 0, [0.0, 1.0, 1.0], config={"updates": 2, "lr": 9.0})  # another setting
    _fake_run(b / "running", "rloo", 0, [0.0, 0.5], end=False)
    runs = find_runs([tmp_path])
    assert sorted(r["path"] for r in runs) == sorted(str(x) for x in (a / "grpo0", a / "grpo1", a / "mc0", a / "mc1", b / "mc0"))
    assert len(find_runs([tmp_path], partial=True)) == 6
    assert [r["method"] for r in find_runs([b / "running"])] == ["rloo"]  # named itself: reported though unfinished
    shutil.copytree(a / "grpo0", tmp_path / "c" / "grpo0")  # the same run twice counts once
    assert len(find_runs([a, a / "grpo0", tmp_path / "c"])) == 4
    sid_a, sid_b = load_run(a / "mc0")["setting"], load_run(b / "mc0")["setting"]
    assert sid_a != sid_b and load_run(a / "grpo0")["setting"] == sid_a

    summary = summarize(runs)
    assert set(summary["methods"]) == {"grpo", f"mcgpo@{sid_a}", f"mcgpo@{sid_b}"}  # mcgpo runs in two settings
    grpo = summary["methods"]["grpo"]
    assert grpo["L5"]["per_seed"] == pytest.approx([0.3, 0.1]) and grpo["seeds"] == [0, 1]
    assert grpo["diagnostics"] == {"pairs": 1.5} and grpo["cpu_seconds"] == 0.5
    # L5 differences mcgpo - grpo: seed 0: 0.5 - 0.3, seed 1: 0.3 - 0.1
    assert set(summary["paired"]) == {f"mcgpo@{sid_a}"}
    p = summary["paired"][f"mcgpo@{sid_a}"]
    assert p["baseline"] == "grpo" and p["L5"]["n"] == 2
    assert p["L5"]["mean"] == pytest.approx(0.2) and p["L5"]["sd"] == pytest.approx(0.0, abs=1e-12)
    assert summary["settings"][sid_b]["baseline"] == f"mcgpo@{sid_b}" and summary["baseline"] is None
    flipped = summarize(runs, baseline="mcgpo")
    assert set(flipped["paired"]) == {"grpo"} and flipped["paired"]["grpo"]["L5"]["mean"] == pytest.approx(-0.2)
    with pytest.raises(ValueError, match="baseline 'nope' has no runs"):
        summarize(runs, baseline="nope")
    md = write_markdown(summary)
    assert "| grpo | 20.0 ± 14.1 | " in md and f"| E-v0 | trainer | {sid_a} |" in md
    assert f"| mcgpo@{sid_a} | grpo | +20.0 | [+20.0, +20.0] |" in md

    result = CliRunner().invoke(app, ["report", str(a), str(b), "--baseline", "mcgpo"])
    assert result.exit_code == 0, result.output
    assert f"| grpo | mcgpo@{sid_a} | -20.0 |" in result.output and not (a / "results.md").exists()  # files only with --out
    result = CliRunner().invoke(app, ["report", str(tmp_path / "nowhere")])
    assert result.exit_code == 2 and "no such file or folder" in result.output


@pytest.mark.skipif(not hasattr(__import__("signal"), "SIGXFSZ"), reason="needs RLIMIT_FSIZE (POSIX)")
def test_a_failed_write_leaves_the_previous_report_whole(tmp_path: Path) -> None:
    """The disk fills while ``results.json`` is being written (RLIMIT_FSIZE makes every write past
    the limit fail, as a full disk does): the previous report's files stay whole and no temporary
    file is left (the old code truncated ``results.json`` first, leaving half a file)."""
    import resource
    import signal

    from trainers.report import write_report

    _fake_run(tmp_path / "runs" / "grpo0", "grpo", 0, [0.0, 0.2, 0.4])
    out = tmp_path / "report"
    write_report(find_runs([tmp_path / "runs"]), out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(before) == ["curves.png", "diagnostics.png", "results.json", "results.md"]
    for seed in range(1, 6):
        _fake_run(tmp_path / "runs" / f"mc{seed}", "mcgpo", seed, [0.0, 0.1 * seed, 0.2])
    limit = len(before["results.json"]) + 16  # the new summary is several times longer
    old_limit, old_handler = resource.getrlimit(resource.RLIMIT_FSIZE), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old_limit[1]))
        with pytest.raises(OSError):
            write_report(find_runs([tmp_path / "runs"]), out)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    json.loads(before["results.json"])
    assert len(write_report(find_runs([tmp_path / "runs"]), out)["methods"]) == 2  # and the next write works
    assert sorted(p.name for p in out.iterdir()) == sorted(before)


def test_curves_axes_read_as_rates_and_whole_updates() -> None:
    """curves.png: a run that never succeeds had a success axis down to -0.05 and
    ticks at updates 0.5, 1.5, ...; the training games before/after RL were missing."""
    from trainers.report import curves_figure

    run = {"name": "demo", "eval": [{"update": u, "success": 0.0, "episodes": 4} for u in (0, 2, 4)],
           "train": [{"update": u, "train/success": 0.0, "opt/loss": 0.1 * u, "credit/adv_std": 1.0} for u in (1, 2, 3, 4)],
           "summary": {"train_games_eval": {"before": {"success": 0.25, "episodes": 8},
                                            "after": {"success": 0.5, "episodes": 8}}}}
    fig = curves_figure([run])
    games, val, train = fig.axes[0], fig.axes[1], fig.axes[2]
    for ax in (val, train):
        assert ax.get_ylim() == (-0.02, 1.02)
    for ax in fig.axes:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
    # what the run showed leads: the training games won before -> after RL, as counts
    assert len(fig.axes) == 5 and "training games won" in games.get_title()
    assert [p.get_height() for p in games.patches] == [0.25, 0.5]
    assert [t.get_text() for t in games.texts] == ["2/8", "4/8"]
    # the flat validation curve says that it is flat
    assert [t.get_text() for t in val.texts] == ["unchanged: 0/4 won in all 3 evaluations"]
    # without training games: the four curves, validation first
    del run["summary"]
    assert [ax.get_title() for ax in curves_figure([run]).axes][:2] == ["validation success", "training success (rollouts)"]


def test_the_summary_leads_with_what_the_run_showed(tmp_path) -> None:
    """The summary used to open with validation 0.000 → 0.000 and "L5 (mean of the last five
    evaluations)" computed from two, and gave the training games on line 10 as 0.250 → 0.500."""
    import json

    from trainers.report import load_run, summary_text

    run = tmp_path / "run"
    run.mkdir()
    recs = [{"update": u, "phase": "eval", "success": 0.0, "score": 0.0, "episodes": 4} for u in (0, 2, 4)]
    recs += [{"update": u, "phase": "train", "train/success": 0.25, "time/update_s": 1.0} for u in (1, 2, 3, 4)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (run / "summary.json").write_text(json.dumps({"train_games_eval": {
        "before": {"success": 0.25, "score": 0.3, "episodes": 8}, "after": {"success": 0.5, "score": 0.55, "episodes": 8}}}))
    lines = summary_text(load_run(run)).splitlines()
    assert lines[1].startswith("training games won before → after the RL phase: 2/8 → 4/8 ")
    assert lines[2] == "validation games won before training → after update 4: 0/4 → 0/4 (unchanged; 3 evaluations)"
    assert "mean validation success of the 2 evaluation(s) after update 0 (L5 would average five): 0.000" in lines
    recs = [{"update": u, "phase": "eval", "success": 0.1 * u, "episodes": 10} for u in range(6)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    text = summary_text(load_run(run))
    assert "L5 (mean of the last five evaluations): 0.300" in text  # (0.1 + ... + 0.5) / 5
    assert "validation games won before training → after update 5: 0/10 → 5/10 (changed; 6 evaluations)" in text
