"""The one report of every run, trainer's and arena's alike (SPEC §6).

Both write the schema of :mod:`trainers.metrics`, so one reader serves both:

* :func:`load_run` reads one run folder (any ``metrics.jsonl``: a ``rubricgym train`` run,
  an arena ``runs/<method>__seed<k>`` folder, or an arena file from before the schema);
  :func:`find_runs` finds every run folder under the given paths;
* :func:`summarize` groups the runs by *setting* (source, env and the whole configuration
  apart from method and seed: :func:`setting_id`) and method (``estimator[:variant]``), gives
  per group the readouts over seeds (mean, sample SD, per seed), and within each setting the
  paired differences of every method to the setting's baseline over the seeds both have,
  with 95% Student-t intervals (df = n − 1) and the minimum detectable difference;
* :func:`write_markdown` / :func:`write_report` write that as one table (``results.md``),
  ``results.json``, ``curves.png`` and ``diagnostics.png`` — what ``rubricgym report`` and
  ``rubricgym arena`` print;
* :func:`write_run_report` draws one run's ``curves.png`` and ``summary.txt`` (the trainer
  does at the end of a run).

Readouts (:mod:`trainers.stats`, the statistics of every report), from the ``eval``
records (the last per update):

* **L5** = mean validation success over the last five scheduled evaluations [MCGPO Eq. 14]
  (over all of them when a run has fewer than five: then it is the mean of that many, and
  every report says which entered it, :func:`l5_updates` and :func:`l5_wording`); the evaluation before the first
  update is not scheduled and never counts;
* **normalised AUC** = the trapezoidal area under the success curve (update 0, the
  untrained policy, included) divided by the span of updates — the mean success over
  training on a 0–1 scale;
* **final** / **initial** success, **score L5** (L5 of the graded score), **invalid rate**
  (mean over the evaluations of the share of inadmissible validation steps).

Example:
    >>> r = readouts([{"update": 0, "success": 0.0}, {"update": 5, "success": 0.5},
    ...               {"update": 10, "success": 1.0}])
    >>> r["L5"], r["AUC"], r["final"], r["initial"]
    (0.75, 0.5, 1.0, 0.0)
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from trainers.metrics import SCHEMA_VERSION, MetricFileError, read_metrics
from trainers.sources import CONTROL_VARIANT, flat_config
from trainers.stats import l5, mde, normalized_auc, paired_interval

__all__ = [
    "READOUTS",
    "RUN_DIR_PATTERN",
    "RunInfo",
    "clean_floats",
    "find_runs",
    "l5_updates",
    "l5_wording",
    "load_run",
    "plot_curves",
    "plot_diagnostics",
    "plot_runs",
    "readouts",
    "setting_id",
    "summarize",
    "summary_text",
    "won",
    "write_markdown",
    "write_report",
    "write_run_report",
    "write_text_atomic",
]

log = logging.getLogger(__name__)

#: Arena run folders are named ``<method>__seed<k>``.
RUN_DIR_PATTERN = re.compile(r"^(?P<method>.+)__seed(?P<seed>-?\d+)$")

#: The readouts of one run, in table order.
READOUTS = ("L5", "AUC", "final", "initial", "score_L5", "invalid_rate")

#: Configuration fields that name, place or pace a run without changing what it computes:
#: not part of its setting (with the method's and the seed's).
_NOT_SETTING = {
    "trainer": frozenset({"seed", "estimator", "run_name", "output_dir", "progress", "tensorboard", "env_workers",
                          "torch_threads", "save_rollouts", "save_every", "keep_checkpoints", "preset",
                          "rollout_batch_size", "logprob_batch_rows"}),
    "arena": frozenset({"save_rollouts", "memo", "fast_grammar"}),
}


@contextmanager
def _replacing(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary file beside ``path`` to write; it replaces ``path`` when the block ends
    without an error (``os.replace``, atomic), else it is removed and ``path`` is left as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically (a reader sees the old file or the new one, whole)."""
    with _replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


class RunInfo(dict):
    """One run as the report reads it (a dict).

    Keys: ``name`` (folder name), ``path``, ``source`` (``trainer`` / ``arena``), ``env``,
    ``estimator``, ``variant``, ``method``, ``seed``, ``setting`` (:func:`setting_id`),
    ``config``, ``identity`` (the ``run`` record, ``{}`` for older files), ``eval`` (the
    ``eval`` records with a ``success``, the last per update, in update order), ``train``
    (the ``train`` records, likewise), ``end`` (the ``end`` record or ``None``),
    ``complete`` (finished: an ``end`` record, or an older trainer run's ``summary.json``),
    ``summary`` (the trainer's ``summary.json``, ``{}`` if none), ``readouts``
    (:func:`readouts`), ``l5`` and ``auc`` (two of them), ``seconds`` and ``cpu_seconds``
    (per run, NaN if unknown).
    """


def setting_id(source: str, env: Any, config: Mapping[str, Any]) -> str:
    """Six hex digits naming a setting: ``source``, ``env`` and ``config`` without the fields
    that only name, place or pace a run (its method and seed among them)."""
    skip = _NOT_SETTING.get(source, frozenset())
    kept = {k: v for k, v in flat_config(source, config or {}).items() if k not in skip}
    text = json.dumps([source, env, kept], sort_keys=True, default=str)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:6]


def readouts(evals: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """:data:`READOUTS` of the evaluation records (``update``, ``success``, optionally
    ``score`` and ``invalid_rate``) in update order; NaN where there is nothing to read
    (L5 and score L5 need an evaluation after update 0)."""
    ev = [e for e in evals if e.get("success") is not None]
    if not ev:
        return dict.fromkeys(READOUTS, float("nan"))
    ups = [float(e["update"]) for e in ev]
    succ = [float(e["success"]) for e in ev]
    score = [float(e["score"]) if e.get("score") is not None else s for e, s in zip(ev, succ)]
    inv = [float(e.get("invalid_rate") or 0.0) for e in ev]
    scheduled = any(u > 0 for u in ups)
    return {
        "L5": l5(ups, succ) if scheduled else float("nan"),
        "AUC": normalized_auc(ups, succ),
        "final": succ[-1],
        "initial": succ[0],
        "score_L5": l5(ups, score) if scheduled else float("nan"),
        "invalid_rate": float(np.mean(inv)),
    }


def l5_updates(evals: Sequence[Mapping[str, Any]], window: int = 5) -> list[int]:
    """The updates whose evaluations enter L5: the last ``window`` scheduled ones (after update 0).

    >>> l5_updates([{"update": u, "success": 0.5} for u in (0, 4, 8, 12)])
    [4, 8, 12]
    """
    return sorted({int(e["update"]) for e in evals if e.get("success") is not None and e["update"] > 0})[-window:]


def l5_wording(updates: Sequence[int]) -> str:
    """What L5 averaged, in words (fewer than five evaluations after update 0 say so).

    >>> l5_wording([2, 4, 6, 8, 10])
    'the mean of the last five evaluations (updates 2, 4, 6, 8, 10)'
    >>> l5_wording([4, 8, 12])
    'the mean validation success of the 3 evaluations after update 0 (updates 4, 8, 12; L5 would average five)'
    """
    n = len(updates)
    where = f"updates {', '.join(map(str, updates))}"
    if n >= 5:
        return f"the mean of the last five evaluations ({where})"
    plural = "s" if n != 1 else ""
    return f"the mean validation success of the {n} evaluation{plural} after update 0 ({where}; L5 would average five)"


def last_per_update(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One record per update (a resumed run may repeat one: the last counts), in update order."""
    return sorted({r["update"]: dict(r) for r in records}.values(), key=lambda r: r["update"])


def _identity(run_dir: Path, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``source``, ``env``, ``estimator``, ``variant``, ``method``, ``seed``, ``config`` of a
    run: its ``run`` record; for older files the trainer's ``config.yaml`` or the arena's
    folder name (and its comparison's ``config.json``)."""
    rec = next((r for r in reversed(records) if r["phase"] == "run"), None)
    if rec is not None:
        method = str(rec.get("method") or rec.get("estimator") or "?")
        est, _, var = method.partition(":")
        return {"source": rec.get("source", "?"), "env": rec.get("env"), "estimator": rec.get("estimator") or est,
                "variant": rec.get("variant", var) or "", "method": method, "seed": int(rec.get("seed") or 0),
                "config": rec.get("config") or {}, "identity": dict(rec)}
    if (run_dir / "config.yaml").is_file():
        import yaml

        cfg = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8")) or {}
        flat = flat_config("trainer", cfg)
        est = str(flat.get("estimator", "?"))
        return {"source": "trainer", "env": flat.get("env_id"), "estimator": est, "variant": "", "method": est,
                "seed": int(flat.get("seed", 0)), "config": cfg, "identity": {}}
    match = RUN_DIR_PATTERN.match(run_dir.name)
    if match:
        cfg: dict[str, Any] = {}
        parent_cfg = run_dir.parent.parent / "config.json"  # <comparison>/runs/<method>__seed<k>
        if parent_cfg.is_file():
            try:
                cfg = json.loads(parent_cfg.read_text(encoding="utf-8")).get("arena") or {}
            except (ValueError, AttributeError):
                cfg = {}
        method = match.group("method")
        est, _, var = method.partition(":")
        return {"source": "arena", "env": cfg.get("env"), "estimator": est, "variant": var, "method": method,
                "seed": int(match.group("seed")), "config": cfg, "identity": {}}
    return {"source": "?", "env": None, "estimator": "?", "variant": "", "method": "?", "seed": 0, "config": {},
            "identity": {}}


def load_run(run_dir: str | os.PathLike[str]) -> RunInfo:
    """Read one run folder (or its ``metrics.jsonl``), trainer's or arena's.

    Raises:
        FileNotFoundError: no ``metrics.jsonl``.
        MetricFileError: a corrupt line or record (names the file and line), or a
            ``summary.json`` that is not JSON.
    """
    run_dir = Path(run_dir)
    if run_dir.name == "metrics.jsonl" and not run_dir.is_dir():
        run_dir = run_dir.parent
    records = read_metrics(run_dir)
    ident = _identity(run_dir, records)
    evals = last_per_update(r for r in records if r["phase"] == "eval" and r.get("success") is not None)
    train = last_per_update(r for r in records if r["phase"] == "train")
    end = next((r for r in reversed(records) if r["phase"] == "end"), None)
    summary: dict[str, Any] = {}
    if (run_dir / "summary.json").is_file():
        try:
            summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise MetricFileError(f"{run_dir / 'summary.json'}: not JSON: {exc}") from None
    seconds = (end or {}).get("seconds", summary.get("seconds"))
    cpu = (end or {}).get("cpu_seconds")
    if cpu is None and summary.get("cpu"):
        cpu = sum(c.get("trainer_s", 0.0) + c.get("env_workers_s", 0.0) for c in summary["cpu"] if c)
    ro = readouts(evals)
    return RunInfo(
        name=run_dir.name, path=str(run_dir), **ident,
        setting=setting_id(ident["source"], ident["env"], ident["config"]),
        eval=evals, train=train, end=end, complete=end is not None or (ident["source"] == "trainer" and bool(summary)),
        summary=summary, readouts=ro, l5=ro["L5"], auc=ro["AUC"],
        seconds=float("nan") if seconds is None else float(seconds),
        cpu_seconds=float("nan") if cpu is None else float(cpu),
    )


def _run_folders(path: Path) -> list[Path]:
    """``path`` if it is a run folder, else every run folder below it (none inside another)."""
    if (path / "metrics.jsonl").is_file():
        return [path]
    found = []
    for root, subdirs, files in os.walk(path):
        if "metrics.jsonl" in files:
            found.append(Path(root))
            subdirs[:] = []  # checkpoints, rollouts, tensorboard: no runs in there
        else:
            if "metrics.jsonl.partial" in files:
                log.warning("skipping %s: an arena run still running (or interrupted)", root)
            subdirs.sort()
    return sorted(found)


def find_runs(paths: Iterable[str | os.PathLike[str]], *, partial: bool = False) -> list[RunInfo]:
    """Every run under ``paths`` (run folders, their ``metrics.jsonl``, or folders above them).

    Runs without an evaluation, and unfinished ones (no ``end`` record: running, or
    interrupted) found below a folder unless ``partial``, are left out with a warning (an
    unfinished run folder named itself is reported, with a warning); a run met twice (the
    same setting, method and seed in two folders) counts once, the first.

    Raises:
        MetricFileError: a path that does not exist or holds no run, no run left to
            report, or a corrupt metric file (names it).
    """
    folders: list[Path] = []
    named: set[Path] = set()
    for p in paths:
        p = Path(p)
        if p.name == "metrics.jsonl" and p.is_file():
            p = p.parent
        if not p.exists():
            raise MetricFileError(f"{p}: no such file or folder")
        found = _run_folders(p)
        if found == [p]:
            named.add(p.resolve())
        if not found:
            raise MetricFileError(f"{p}: no run folder (one holding metrics.jsonl) there or below it")
        folders += found
    runs: list[RunInfo] = []
    seen_paths: set[Path] = set()
    seen: dict[tuple[str, str, int], str] = {}
    for folder in folders:
        if folder.resolve() in seen_paths:
            continue
        seen_paths.add(folder.resolve())
        run = load_run(folder)
        if not run["eval"]:
            log.warning("skipping %s: no evaluation yet", folder)
            continue
        if not run["complete"]:
            if not partial and folder.resolve() not in named:
                log.warning("skipping %s: unfinished (running or interrupted; --partial reports it)", folder)
                continue
            log.warning("%s is unfinished (running or interrupted): reporting its %d evaluation(s)", folder,
                        len(run["eval"]))
        key = (run["setting"], run["method"], run["seed"])
        if key in seen:
            log.warning("skipping %s: the same run (setting %s, %s, seed %d) as %s", folder, *key, seen[key])
            continue
        seen[key] = str(folder)
        runs.append(run)
    if not runs:
        raise MetricFileError("no run to report under " + ", ".join(str(p) for p in paths)
                              + (" (unfinished runs need --partial)" if not partial else ""))
    return runs


# ------------------------------------------------------------------------------- summary


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    v = np.asarray(values, dtype=np.float64)
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else float("nan")


def _nanmean(values: Sequence[float]) -> float:
    v = np.asarray([x for x in values if math.isfinite(x)], dtype=np.float64)
    return float(v.mean()) if v.size else float("nan")


def _diagnostics(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Mean over updates of every numeric ``credit/*`` value but timings, named without
    ``credit/`` (and without the ``stat_`` of ``CreditResult.stats`` entries where that
    leaves the name unique)."""
    acc: dict[str, list[float]] = defaultdict(list)
    for rec in records:
        for k, v in rec.items():
            if (k.startswith("credit/") and not k.endswith("_s") and isinstance(v, (int, float))
                    and not isinstance(v, bool) and math.isfinite(v)):
                acc[k[len("credit/"):]].append(float(v))
    direct = {k for k in acc if not k.startswith("stat_")}
    out = {}
    for k, v in sorted(acc.items()):
        name = k[len("stat_"):] if k.startswith("stat_") and k[len("stat_"):] not in direct else k
        out[name] = float(np.mean(v))
    return dict(sorted(out.items()))


def _labels(runs: Sequence[RunInfo]) -> dict[tuple[str, str], str]:
    """(setting, method) -> table label: the method, with ``@setting`` where the same method
    runs in several settings."""
    settings_of: dict[str, set[str]] = defaultdict(set)
    for r in runs:
        settings_of[r["method"]].add(r["setting"])
    return {(r["setting"], r["method"]): r["method"] if len(settings_of[r["method"]]) == 1
            else f"{r['method']}@{r['setting']}" for r in runs}


def summarize(runs: Sequence[RunInfo], baseline: str | None = None,
              paired_readouts: Sequence[str] = ("L5", "AUC")) -> dict[str, Any]:
    """Per (setting, method): the readouts across seeds; per setting: every method's paired
    differences to the setting's baseline over the seeds both have.

    Args:
        runs: Runs from :func:`find_runs` / :func:`load_run`.
        baseline: The method to compare against, in every setting that has it; elsewhere
            (and by default) ``grpo`` if the setting has it, else its first method.
        paired_readouts: Readouts that get paired differences.

    Returns:
        ``{"schema", "baseline" (its label when there is one setting, else None),
        "settings": {setting: {"source", "env", "baseline", "methods", "runs", "folder"}},
        "methods": {label: {"setting", "source", "env", "method", "estimator", "variant",
        "seeds", "runs", readout: {"mean", "sd", "per_seed"}, "diagnostics", "seconds",
        "cpu_seconds", "L5_updates" (the updates whose validations entered L5, per distinct
        schedule)}}, "paired": {label: {"setting", "baseline", readout: {"mean", "sd",
        "lo", "hi", "n", "mde"}}}}``.  A label is the method, or ``method@setting`` when a
        method runs in several settings.  With one shared seed the SD, interval and MDE
        are NaN.

    Raises:
        ValueError: no runs, or a ``baseline`` that no setting has.
    """
    if not runs:
        raise ValueError("summarize needs at least one run")
    labels = _labels(runs)
    groups: dict[str, dict[str, dict[int, RunInfo]]] = defaultdict(lambda: defaultdict(dict))
    for run in runs:
        groups[run["setting"]][run["method"]][int(run["seed"])] = run
    if baseline is not None and not any(baseline in methods for methods in groups.values()):
        known = sorted({m for methods in groups.values() for m in methods})
        raise ValueError(f"baseline {baseline!r} has no runs; methods: {', '.join(known)}")

    def order(sid: str) -> tuple[str, str, str]:
        first = next(iter(next(iter(groups[sid].values())).values()))
        return (str(first["source"]), str(first["env"]), sid)

    out: dict[str, Any] = {"schema": SCHEMA_VERSION, "baseline": None, "settings": {}, "methods": {}, "paired": {}}
    for sid in sorted(groups, key=order):
        by_method = groups[sid]
        methods = sorted(by_method)
        base = baseline if baseline in by_method else ("grpo" if "grpo" in by_method else methods[0])
        any_run = next(iter(by_method[methods[0]].values()))
        paths = [r["path"] for m in methods for r in by_method[m].values()]
        out["settings"][sid] = {
            "source": any_run["source"], "env": any_run["env"], "baseline": labels[(sid, base)],
            "methods": [labels[(sid, m)] for m in methods], "runs": len(paths),
            "folder": os.path.commonpath([os.path.abspath(p) for p in paths]),
        }
        for m in methods:
            seeds = sorted(by_method[m])
            rs = [by_method[m][s] for s in seeds]
            entry: dict[str, Any] = {
                "setting": sid, "source": any_run["source"], "env": any_run["env"], "method": m,
                "estimator": rs[0]["estimator"], "variant": rs[0]["variant"], "seeds": seeds,
                "runs": [r["path"] for r in rs],
            }
            for key in READOUTS:
                vals = [r["readouts"][key] for r in rs]
                mean, sd = _mean_sd(vals)
                entry[key] = {"mean": mean, "sd": sd, "per_seed": vals}
            entry["L5_updates"] = [list(u) for u in sorted({tuple(l5_updates(r["eval"])) for r in rs})]
            entry["diagnostics"] = _diagnostics([rec for r in rs for rec in r["train"]])
            entry["seconds"] = _nanmean([r["seconds"] for r in rs])
            entry["cpu_seconds"] = _nanmean([r["cpu_seconds"] for r in rs])
            out["methods"][labels[(sid, m)]] = entry
        for m in methods:
            shared = sorted(set(by_method[base]) & set(by_method[m]))
            if m == base or not shared:
                continue
            pair: dict[str, Any] = {"setting": sid, "baseline": labels[(sid, base)]}
            for key in paired_readouts:
                diffs = [by_method[m][s]["readouts"][key] - by_method[base][s]["readouts"][key] for s in shared]
                mean, sd, lo, hi = paired_interval(diffs)
                pair[key] = {"mean": mean, "sd": sd, "lo": lo, "hi": hi, "n": len(shared), "mde": mde(sd, len(shared))}
            out["paired"][labels[(sid, m)]] = pair
        out.setdefault("calibration", {}).update(_calibration(sid, by_method, labels))
    out.setdefault("calibration", {})
    if len(out["settings"]) == 1:
        out["baseline"] = next(iter(out["settings"].values()))["baseline"]
    return out


def _calibration(sid: str, by_method: Mapping[str, Mapping[int, RunInfo]],
                 labels: Mapping[tuple[str, str], str]) -> dict[str, Any]:
    """Each control ``<method>:<control>`` of a setting against its ``<method>`` over their
    shared seeds: the paired difference of L5 and whether the setting resolves the loss (the
    95% interval lies wholly below 0)."""
    out: dict[str, Any] = {}
    for m in sorted(by_method):
        parent, _, variant = m.rpartition(":")
        if not parent or not CONTROL_VARIANT.match(variant) or parent not in by_method:
            continue
        shared = sorted(set(by_method[parent]) & set(by_method[m]))
        if len(shared) < 2:
            continue
        diffs = [by_method[m][s]["readouts"]["L5"] - by_method[parent][s]["readouts"]["L5"] for s in shared]
        mean, sd, lo, hi = paired_interval(diffs)
        out[labels[(sid, m)]] = {"setting": sid, "parent": labels[(sid, parent)], "mean": mean, "sd": sd,
                                 "lo": lo, "hi": hi, "n": len(shared), "mde": mde(sd, len(shared)),
                                 "resolved": bool(hi < 0)}
    return out


# ------------------------------------------------------------------------------- the table


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * x:.1f}"


def _pm(entry: Mapping[str, Any]) -> str:
    sd = entry["sd"]
    return f"{_pct(entry['mean'])} ± {_pct(sd)}" if math.isfinite(sd) else _pct(entry["mean"])


def _signed(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * x:+.1f}"


def _secs(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:.0f}"


def write_markdown(summary: Mapping[str, Any], path: str | os.PathLike[str] | None = None, *,
                   title: str = "Run comparison", preamble: str = "") -> str:
    """The results tables (percent; mean ± sample SD over seeds) as Markdown; written to
    ``path`` when given; returns the text.

    The first table has one row per (setting, method): L5, normalised AUC, final and initial
    success, score L5, validation invalid rate, seeds, wall and CPU seconds per run (wall
    time depends on what else the machine runs; CPU time much less), env, source and setting.
    The second gives each method's paired differences to its setting's baseline with 95%
    Student-t intervals and MDEs; a list of the settings and the estimator diagnostics follow.
    """
    lines = [f"# {title}", ""]
    if preamble:
        lines += [preamble, ""]
    lines += [
        ("| method | L5 success (%) | norm. AUC (%) | final (%) | initial (%) | score L5 (%) | invalid (%) | seeds "
        "| s/run | CPU s/run | env | source | setting |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, e in summary["methods"].items():
        lines.append(
            f"| {label} | {_pm(e['L5'])} | {_pm(e['AUC'])} | {_pm(e['final'])} | {_pm(e['initial'])} "
            f"| {_pm(e['score_L5'])} | {_pct(e['invalid_rate']['mean'])} | {len(e['seeds'])} "
            f"| {_secs(e['seconds'])} | {_secs(e['cpu_seconds'])} | {e['env']} | {e['source']} | {e['setting']} |"
        )
    lines += _l5_lines(summary)
    if summary["paired"]:
        lines += [
            "",
            ("Paired differences to the baseline of each setting (percentage points; pairs = runs of one setting "
             "with the same seed; mean and 95% Student-t interval over seeds, df = n − 1; MDE = the smallest true "
             "difference a paired two-sided t-test at α = 0.05 detects with 80% power at this SD of the "
             "differences and n seeds; n/a with one pair):"),
            "",
            "| method | baseline | Δ L5 | 95% CI (L5) | SD (L5) | MDE (L5) | Δ AUC | 95% CI (AUC) | MDE (AUC) | n |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for label, p in summary["paired"].items():
            a, b = p["L5"], p["AUC"]
            lines.append(
                f"| {label} | {p['baseline']} | {_signed(a['mean'])} | [{_signed(a['lo'])}, {_signed(a['hi'])}] "
                f"| {_pct(a['sd'])} | {_pct(a['mde'])} | {_signed(b['mean'])} | [{_signed(b['lo'])}, {_signed(b['hi'])}] "
                f"| {_pct(b['mde'])} | {a['n']} |"
            )
    lines += _calibration_lines(summary.get("calibration") or {})
    lines += ["", ("Settings (source, env and the whole configuration apart from method and seed; runs pair "
                  "only within one):"), ""]
    for sid, st in summary["settings"].items():
        lines.append(f"* `{sid}`: {st['source']}, env `{st['env']}`, {st['runs']} run(s) under `{st['folder']}`; "
                     f"baseline {st['baseline']}")
    if any(e["diagnostics"] for e in summary["methods"].values()):
        lines += ["", "Estimator diagnostics (mean over updates and seeds):", ""]
        for label, e in summary["methods"].items():
            d = e["diagnostics"]
            if d:
                body = ", ".join(f"{k} = {v:.3g}" for k, v in d.items())
                lines.append(f"* **{label}**: {body}")
    text = "\n".join(lines) + "\n"
    if path is not None:
        write_text_atomic(path, text)
    return text


def _l5_lines(summary: Mapping[str, Any]) -> list[str]:
    """What L5 averaged in this table: one line, or one per schedule when the runs differ."""
    schedules = sorted({tuple(u) for e in summary["methods"].values() for u in e.get("L5_updates") or []})
    if not schedules:
        return []
    if len(schedules) == 1:
        return ["", f"L5 here is {l5_wording(schedules[0])}."]
    return ["", "L5 here is, depending on the run's schedule: " + "; ".join(l5_wording(u) for u in schedules) + "."]


def _calibration_lines(calibration: Mapping[str, Any]) -> list[str]:
    """The calibration table: which degraded controls this setting resolves from their parent."""
    if not calibration:
        return []
    lines = [
        "",
        ("Calibration (controls degraded on purpose, each paired with the method it degrades; resolved = the "
         "95% interval of Δ L5 lies wholly below 0, i.e. this setting can see that loss of credit):"),
        "",
        "| control | vs | Δ L5 | 95% CI | SD | MDE | n | resolved |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, c in calibration.items():
        lines.append(f"| {label} | {c['parent']} | {_signed(c['mean'])} | [{_signed(c['lo'])}, {_signed(c['hi'])}] "
                     f"| {_pct(c['sd'])} | {_pct(c['mde'])} | {c['n']} | {'yes' if c['resolved'] else 'no'} |")
    missed = [label for label, c in calibration.items() if not c["resolved"]]
    if missed:
        lines += ["", "Not resolved here: " + ", ".join(missed) + " — a loss of credit of that kind and size is "
                  "invisible to this setting, so a null result between estimators of that kind says nothing."]
    return lines


# ------------------------------------------------------------------------------- plots


def plot_curves(runs: Sequence[RunInfo], path: str | os.PathLike[str], *, title: str = "") -> None:
    """Validation success against update: per-seed lines (thin) and the seed mean (thick) of
    every (setting, method)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = _labels(runs)
    by_label: dict[str, list[RunInfo]] = defaultdict(list)
    for run in runs:
        by_label[labels[(run["setting"], run["method"])]].append(run)
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    cmap = plt.get_cmap("tab10" if len(by_label) <= 10 else "tab20")
    for k, (label, rs) in enumerate(sorted(by_label.items())):
        color = cmap(k % cmap.N)
        for r in rs:
            ax.plot([e["update"] for e in r["eval"]], [100 * e["success"] for e in r["eval"]], color=color,
                    alpha=0.25 if len(rs) > 1 else 1.0, linewidth=0.8 if len(rs) > 1 else 1.5,
                    label=label if len(rs) == 1 else None)
        curves = {tuple(e["update"] for e in r["eval"]) for r in rs}
        if len(rs) > 1 and len(curves) == 1:
            mean = np.mean([[e["success"] for e in r["eval"]] for r in rs], axis=0)
            ax.plot(next(iter(curves)), 100 * mean, color=color, linewidth=2.0, label=label)
    ax.set_xlabel("update")
    ax.set_ylabel("validation success (%)")
    ax.set_ylim(-2, 102)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    with _replacing(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)


def plot_diagnostics(runs: Sequence[RunInfo], path: str | os.PathLike[str], *, max_panels: int = 12) -> list[str]:
    """Estimator diagnostics (``credit/*``) over training, seed mean per (setting, method),
    one panel per statistic; returns the plotted names (the first ``max_panels``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = _labels(runs)
    series: dict[str, dict[str, dict[int, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for run in runs:
        label = labels[(run["setting"], run["method"])]
        for rec in run["train"]:
            for name, v in _diagnostics([rec]).items():
                series[name][label][int(rec["update"])].append(v)
    names = sorted(series)[:max_panels]
    cols = 3
    rows = max(1, math.ceil(len(names) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows), dpi=100, squeeze=False)
    all_labels = sorted(set(labels.values()))
    cmap = plt.get_cmap("tab10" if len(all_labels) <= 10 else "tab20")
    colors = {m: cmap(k % cmap.N) for k, m in enumerate(all_labels)}
    for ax, name in zip(axes.flat, names):
        for label, per_update in sorted(series[name].items()):
            xs = sorted(per_update)
            ax.plot(xs, [np.mean(per_update[x]) for x in xs], color=colors[label], label=label, linewidth=1.2)
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    if names:
        axes.flat[0].legend(fontsize=6)
    fig.tight_layout()
    with _replacing(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
    return names


def clean_floats(value: Any, places: int = 12) -> Any:
    """``value`` with every float rounded to ``places`` decimals (``-0.0`` becomes ``0.0``;
    NaN and infinities stay): a sum that cancels reads 0, not noise such as ``2.78e-17``.

    >>> clean_floats({"lo": 2.7755575615628914e-17, "x": [0.1 + 0.2, -1e-15], "n": 3})
    {'lo': 0.0, 'x': [0.3, 0.0], 'n': 3}
    """
    if isinstance(value, (float, np.floating)):
        x = float(value)
        return round(x, places) + 0.0 if math.isfinite(x) else x
    if isinstance(value, Mapping):
        return {k: clean_floats(v, places) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_floats(v, places) for v in value]
    return value


def write_report(runs: Sequence[RunInfo], out_dir: str | os.PathLike[str], *, baseline: str | None = None,
                 title: str = "Run comparison", preamble: str = "") -> dict[str, Any]:
    """Write ``results.md``, ``results.json``, ``curves.png`` and ``diagnostics.png`` of
    ``runs`` into ``out_dir``; returns the :func:`summarize` summary.

    Each file is written atomically: an interrupted or failed write leaves the previous
    report's file whole."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize(runs, baseline)
    write_text_atomic(out_dir / "results.json", json.dumps(clean_floats(summary), indent=2, default=float))
    write_markdown(summary, out_dir / "results.md", title=title, preamble=preamble)
    plot_curves(runs, out_dir / "curves.png", title=title)
    plot_diagnostics(runs, out_dir / "diagnostics.png")
    log.info("wrote %s", out_dir / "results.md")
    return summary


# ------------------------------------------------------------------------------- one run


def plot_runs(runs: Sequence[RunInfo], path: str | os.PathLike[str]) -> Path:
    """Draw validation success, training success, loss and credit diagnostics to one PNG."""
    import matplotlib.pyplot as plt

    fig = curves_figure(runs)
    path = Path(path)
    with _replacing(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return path


def curves_figure(runs: Sequence[RunInfo]) -> Any:
    """The figure of :func:`plot_runs`: success rates on [0, 1], whole-number update ticks.  When
    the runs played their training games before and after the RL phase, that result leads, as
    its own panel of won/played counts; a validation curve that never changes says so."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    games = [(run, g) for run in runs if (g := _training_games(run)) is not None]
    fig, grid = plt.subplots(2, 3 if games else 2, figsize=(15 if games else 11, 7))
    axes = list(grid.flat)
    if games:
        _plot_training_games(axes.pop(0), games)
        fig.delaxes(axes.pop())  # five panels on a 2 × 3 grid
    panels = [("eval", "success", "validation success"), ("train", "train/success", "training success (rollouts)"),
              ("train", "opt/loss", "loss"), ("train", "credit/adv_std", "advantage std (credit)")]
    for ax, (phase, key, title) in zip(axes, panels):
        for run in runs:
            pts = [(r["update"], r[key]) for r in run[phase] if r.get(key) is not None]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, marker="o", ms=3, label=f"{run['name']}")
        ax.set_title(title)
        ax.set_xlabel("update")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # updates are whole numbers
        ax.grid(alpha=0.3)
        if key.endswith("success"):
            ax.set_ylim(-0.02, 1.02)  # a rate: never an axis below 0 or above 1
    _note_flat_validation(axes[0], runs)
    pair_pts = [(r["update"], r["opt/pairs"]) for run in runs for r in run["train"] if r.get("opt/pairs")]
    if pair_pts:
        ax2 = axes[3].twinx()
        xs, ys = zip(*pair_pts)
        ax2.scatter(xs, ys, s=8, color="grey", label="MCGPO pairs")
        ax2.set_ylabel("pairs / update")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def _training_games(run: RunInfo) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """The run's training games played before and after the RL phase (``train_games_eval``)."""
    games = (run.get("summary") or {}).get("train_games_eval") or {}
    return (games["before"], games["after"]) if games.get("before") and games.get("after") else None


def won(record: Mapping[str, Any], key: str = "success") -> str:
    """Episodes won as a count, ``"2/8"`` (the rate with three decimals when the record has no
    episode count).

    >>> won({"success": 0.25, "episodes": 8}), won({"success": 0.25})
    ('2/8', '0.250')
    """
    rate, n = float(record.get(key) or 0.0), record.get("episodes")
    return f"{round(rate * n)}/{int(n)}" if n else f"{rate:.3f}"


def _plot_training_games(ax: Any, games: Sequence[tuple[RunInfo, Any]]) -> None:
    """The training games played once before and once after the RL phase, as bars of the
    share won, each labelled with its count."""
    width = 0.8 / len(games)
    for k, (run, (before, after)) in enumerate(games):
        xs = [k * width - 0.4 + width / 2, 1 + k * width - 0.4 + width / 2]
        bars = ax.bar(xs, [before.get("success", 0.0), after.get("success", 0.0)], width=width * 0.9,
                      label=run["name"])
        ax.bar_label(bars, labels=[won(before), won(after)])
    ax.set_xticks([0, 1], ["before RL", "after RL"])
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("share of training games won")
    ax.set_title("training games won (same games and seeds)")
    ax.grid(alpha=0.3, axis="y")


def _note_flat_validation(ax: Any, runs: Sequence[RunInfo]) -> None:
    """Say in the validation panel when no run's validation success ever changed."""
    evals = [run["eval"] for run in runs if run["eval"]]
    flat = evals and all(len({e.get("success") for e in ev}) == 1 for ev in evals)
    if flat and len(evals) == 1:
        ev = evals[0]
        ax.text(0.5, 0.5, f"unchanged: {won(ev[0])} won in all {len(ev)} evaluations", transform=ax.transAxes,
                ha="center", va="center", fontsize=9, color="dimgrey")


def summary_text(run: RunInfo) -> str:
    """A short plain-text summary of one run."""
    rl_loss = (run.get("summary") or {}).get("rl_loss")
    where = f"{run.get('source', '?')} run on {run.get('env')}, "
    lines = [f"run {run['name']}  ({where}estimator {run['method']}, seed {run['seed']}" + (f", rl_loss {rl_loss})" if rl_loss else ")")]
    lines += _result_lines(run)
    if run["eval"]:
        lines.append("validation success by update: " + ", ".join(f"{r['update']}: {r.get('success', 0):.3f}" for r in run["eval"]))
        first, last = run["eval"][0], run["eval"][-1]
        lines.append(_l5_line(run))
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
            line += (f", {trainer + workers:.0f} s CPU (trainer {trainer:.0f} s with {cpu[0].get('torch_threads', '?')} "
                     f"torch thread(s), mixed precision {cpu[0].get('mixed_precision', '?')}, rollouts in "
                     f"{cpu[0].get('rollout_dtype', '?')}, env workers {workers:.0f} s)")
        phases = summ.get("phases_s") or {}
        if phases:
            line += "; phases: " + ", ".join(f"{k} {v:.0f} s" for k, v in phases.items())
        lines.append(line)
    return "\n".join(lines) + "\n"


def _result_lines(run: RunInfo) -> list[str]:
    """What the run showed, first: the training games won before → after the RL phase, and
    the validation games won before → after training, as counts."""
    lines = []
    games = _training_games(run)
    if games is not None:
        b, a = games
        lines.append(f"training games won before → after the RL phase: {won(b)} → {won(a)} (each played once at the "
                     f"validation temperature, same seeds; score {b.get('score', 0):.3f} → {a.get('score', 0):.3f})")
    if run["eval"]:
        first, last = run["eval"][0], run["eval"][-1]
        when = "before training" if first["update"] == 0 else f"at update {first['update']}"
        change = "unchanged" if first.get("success") == last.get("success") else "changed"
        lines.append(f"validation games won {when} → after update {last['update']}: {won(first)} → {won(last)} "
                     f"({change}; {len(run['eval'])} evaluations)")
    return lines


def _l5_line(run: RunInfo) -> str:
    """L5, named for what it averaged: fewer than five evaluations after update 0 say so."""
    n = sum(1 for r in run["eval"] if r["update"] > 0 and r.get("success") is not None)
    if n == 0:
        return "L5: none (no evaluation after update 0)"
    if n >= 5:
        return f"L5 (mean of the last five evaluations): {run['l5']:.3f}"
    return f"mean validation success of the {n} evaluation(s) after update 0 (L5 would average five): {run['l5']:.3f}"


def write_run_report(run_dir: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write ``curves.png`` and ``summary.txt`` into ``run_dir``; return their paths."""
    run = load_run(run_dir)
    png = plot_runs([run], Path(run_dir) / "curves.png")
    txt = Path(run_dir) / "summary.txt"
    write_text_atomic(txt, summary_text(run))
    return png, txt


