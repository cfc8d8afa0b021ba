"""Run reports: learning curves and credit diagnostics to PNG, text summaries, and
multi-run comparisons with paired Student-t intervals (SPEC §6).

``write_run_report(run_dir)`` writes ``curves.png`` and ``summary.txt`` into a run folder;
``compare_runs(run_dirs)`` groups runs by method (estimator) and pairs them by seed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainers.evaluation import l5, normalized_auc, paired_interval
from trainers.metrics import read_metrics

__all__ = ["RunInfo", "compare_runs", "load_run", "plot_runs", "summary_text", "write_run_report"]


class RunInfo(dict):
    """What a report needs from a run folder: ``name``, ``method``, ``seed``, ``eval``
    (list of eval records), ``train`` (list of train records), ``l5``, ``auc``."""


def load_run(run_dir: str | os.PathLike[str]) -> RunInfo:
    """Read a run folder's metrics and configuration."""
    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    cfg: dict[str, Any] = {}
    cfg_path = run_dir / "config.yaml"
    if cfg_path.is_file():
        import yaml

        cfg = yaml.safe_load(cfg_path.read_text()) or {}
    evals = sorted((r for r in records if r.get("phase") == "eval"), key=lambda r: r["update"])
    # a resumed run may repeat an evaluation; keep the last record per update
    evals = list({r["update"]: r for r in evals}.values())
    train = sorted({r["update"]: r for r in records if r.get("phase") == "train"}.values(), key=lambda r: r["update"])
    curve = [(r["update"], r.get("success", 0.0)) for r in evals]
    summary: dict[str, Any] = {}
    if (run_dir / "summary.json").is_file():
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{run_dir / 'summary.json'}: not JSON: {exc}") from None
    return RunInfo(name=run_dir.name, path=str(run_dir), method=cfg.get("estimator", "?"), seed=cfg.get("seed", 0),
                   eval=evals, train=train, l5=l5(curve), auc=normalized_auc(curve), config=cfg, summary=summary)


def plot_runs(runs: Sequence[RunInfo], path: str | os.PathLike[str]) -> Path:
    """Draw validation success, training success, loss and credit diagnostics to one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    panels = [
        (axes[0, 0], "eval", "success", "validation success"),
        (axes[0, 1], "train", "train/success", "training success (rollouts)"),
        (axes[1, 0], "train", "opt/loss", "loss"),
        (axes[1, 1], "train", "credit/adv_std", "advantage std (credit)"),
    ]
    for ax, phase, key, title in panels:
        for run in runs:
            pts = [(r["update"], r[key]) for r in run[phase] if r.get(key) is not None]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, marker="o", ms=3, label=f"{run['name']}")
        ax.set_title(title)
        ax.set_xlabel("update")
        ax.grid(alpha=0.3)
    pair_pts = [(r["update"], r["opt/pairs"]) for run in runs for r in run["train"] if r.get("opt/pairs")]
    if pair_pts:
        ax2 = axes[1, 1].twinx()
        xs, ys = zip(*pair_pts)
        ax2.scatter(xs, ys, s=8, color="grey", label="MCGPO pairs")
        ax2.set_ylabel("pairs / update")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def summary_text(run: RunInfo) -> str:
    """A short plain-text summary of one run."""
    rl_loss = (run.get("summary") or {}).get("rl_loss")
    lines = [f"run {run['name']}  (estimator {run['method']}, seed {run['seed']}" + (f", rl_loss {rl_loss})" if rl_loss else ")")]
    if run["eval"]:
        lines.append("validation success by update: " + ", ".join(f"{r['update']}: {r.get('success', 0):.3f}" for r in run["eval"]))
        first, last = run["eval"][0], run["eval"][-1]
        lines.append(f"first → last validation success: {first.get('success', 0):.3f} → {last.get('success', 0):.3f}")
        lines.append(f"L5 (mean of the last five evaluations): {run['l5']:.3f}")
        lines.append(f"normalised AUC of the success curve: {run['auc']:.3f}")
        types = sorted(k for k in last if k.startswith("success/"))
        if types:
            lines.append("last evaluation per task type: " + ", ".join(f"{k[8:]} {last[k]:.2f}" for k in types))
        chans = sorted(k for k in last if k.startswith("rubric/") and k in first)
        if chans:
            lines.append("rubric progress, first → last validation (mean final channel value): "
                         + ", ".join(f"{k[7:]} {first[k]:.2f} → {last[k]:.2f}" for k in chans))
        lines.append(f"last evaluation: invalid-action rate {last.get('invalid_rate', 0):.3f}, mean steps {last.get('mean_steps', 0):.2f}, score {last.get('score', 0):.3f}")
    warm = (run.get("summary") or {}).get("warm_start")
    if warm:
        kind = "choice" if warm.get("choice_loss") else "response-token"
        line = (f"warm start (behaviour cloning, before update 1): {warm.get('rows', 0):.0f} rows from "
                f"{warm.get('tasks', 0):.0f} walkthroughs, {kind} NLL {warm.get('nll_first', 0):.3f} → {warm.get('nll_last', 0):.3f}")
        if "val_success" in warm:
            line += f"; validation success after it: {warm['val_success']:.3f}"
        lines.append(line)
    games = (run.get("summary") or {}).get("train_games_eval") or {}
    if games.get("before") and games.get("after"):
        b, a = games["before"], games["after"]
        lines.append(f"training games (each played once at the validation temperature, same seeds) before → after the RL "
                     f"phase: success {b.get('success', 0):.3f} → {a.get('success', 0):.3f}, score {b.get('score', 0):.3f} → "
                     f"{a.get('score', 0):.3f} ({b.get('episodes', 0):.0f} games)")
    if run["train"]:
        t = run["train"]
        lines.append("training success by update: " + ", ".join(f"{r['update']}: {r.get('train/success', 0):.2f}" for r in t))
        secs = [r.get("time/update_s", 0.0) for r in t]
        lines.append(f"updates: {len(t)}, mean update time {sum(secs) / len(secs):.1f} s")
    summ = run.get("summary") or {}
    if summ.get("seconds"):
        line = f"time: {summ['seconds']:.0f} s wall"
        cpu = [c for c in summ.get("cpu") or [] if c]
        if cpu:
            trainer = sum(c.get("trainer_s", 0.0) for c in cpu)
            workers = sum(c.get("env_workers_s", 0.0) for c in cpu)
            line += f", {trainer + workers:.0f} s CPU (trainer {trainer:.0f} s with {cpu[0].get('torch_threads', '?')} torch thread(s), env workers {workers:.0f} s)"
        phases = summ.get("phases_s") or {}
        if phases:
            line += "; phases: " + ", ".join(f"{k} {v:.0f} s" for k, v in phases.items())
        lines.append(line)
    return "\n".join(lines) + "\n"


def write_run_report(run_dir: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write ``curves.png`` and ``summary.txt`` into ``run_dir``; return their paths."""
    run = load_run(run_dir)
    png = plot_runs([run], Path(run_dir) / "curves.png")
    txt = Path(run_dir) / "summary.txt"
    txt.write_text(summary_text(run))
    return png, txt


def compare_runs(runs: Sequence[RunInfo]) -> list[dict[str, Any]]:
    """Per method: mean ± SD of L5 and AUC; for every other method vs the first, the paired
    difference over shared seeds with its 95 % Student-t interval (df = n − 1)."""
    by_method: dict[str, dict[int, RunInfo]] = {}
    for r in runs:
        by_method.setdefault(str(r["method"]), {})[int(r["seed"])] = r
    rows: list[dict[str, Any]] = []
    methods = list(by_method)
    for m in methods:
        vals = list(by_method[m].values())
        rows.append({"method": m, "runs": len(vals), "L5": _mean_sd([v["l5"] for v in vals]), "AUC": _mean_sd([v["auc"] for v in vals])})
    base = methods[0] if methods else None
    for m in methods[1:]:
        seeds = sorted(set(by_method[m]) & set(by_method[base]))
        row: dict[str, Any] = {"method": f"{m} − {base}", "runs": len(seeds)}
        for key, field in (("L5", "l5"), ("AUC", "auc")):
            if len(seeds) >= 2:
                row[key] = paired_interval([by_method[m][s][field] for s in seeds], [by_method[base][s][field] for s in seeds])
            else:
                row[key] = None
        rows.append(row)
    return rows


def _mean_sd(xs: list[float]) -> tuple[float, float]:
    n = len(xs)
    mean = sum(xs) / n
    sd = (sum((x - mean) ** 2 for x in xs) / (n - 1)) ** 0.5 if n > 1 else 0.0
    return mean, sd


def to_json(rows: list[dict[str, Any]]) -> str:
    """The comparison rows as JSON."""
    return json.dumps(rows, indent=1)
