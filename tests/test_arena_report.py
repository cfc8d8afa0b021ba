"""Arena report: L5, normalised AUC, paired Student-t intervals, table vs metric files."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from trainers.arena.report import MetricFileError, load_run, load_runs, write_report
from trainers.metrics import upgrade_record
from trainers.stats import paired_interval


def test_paired_student_t_interval_by_hand() -> None:
    # diffs 1, 2, 6: mean 3, SD sqrt(((−2)²+(−1)²+3²)/2) = sqrt(7) = 2.6458;
    # t(0.975, df=2) = 4.302653; half-width = 4.302653·2.6458/sqrt(3) = 6.5724
    mean, sd, lo, hi = paired_interval([1.0, 2.0, 6.0])
    assert mean == pytest.approx(3.0)
    assert sd == pytest.approx(math.sqrt(7))
    assert hi - mean == pytest.approx(4.302653 * math.sqrt(7) / math.sqrt(3), rel=1e-5)
    assert lo == pytest.approx(3.0 - 6.57240, abs=1e-4)
    m1, sd1, lo1, hi1 = paired_interval([0.5])
    assert m1 == 0.5 and math.isnan(sd1) and math.isnan(lo1) and math.isnan(hi1)


def _write_run(root: Path, method: str, seed: int, success: list[float], credit: float, legacy: bool) -> None:
    """An arena metric file: as the arena writes it (the schema of trainers.metrics), or
    ``legacy``, as it wrote it before (records keyed by ``kind``)."""
    d = root / "runs" / f"{method}__seed{seed}"
    d.mkdir(parents=True)
    lines = [{"kind": "config", "method": method, "seed": seed}]
    for k, s in enumerate(success):
        lines.append({"kind": "eval", "update": 5 * k, "success": s, "score": s, "invalid_rate": 0.0})
        if k:
            lines.append({"kind": "train", "update": 5 * k, "success": s, "credit": {"pairs": credit * k}})
    lines.append({"kind": "end", "seconds": 10.0})
    if not legacy:
        lines = [upgrade_record(x) for x in lines]
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def _table_rows(md: str) -> dict[str, list[str]]:
    rows = {}
    for line in md.splitlines():
        if line.startswith("| ") and not line.startswith("| method") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows.setdefault(cells[0], cells[1:])
    return rows


@pytest.mark.parametrize("legacy", [False, True])
def test_table_agrees_with_metric_files(tmp_path: Path, legacy: bool) -> None:
    curves = {
        ("grpo", 0): [0.0, 0.1, 0.2, 0.2, 0.3, 0.3],
        ("grpo", 1): [0.0, 0.0, 0.1, 0.2, 0.2, 0.4],
        ("mcgpo", 0): [0.0, 0.2, 0.3, 0.4, 0.4, 0.5],
        ("mcgpo", 1): [0.0, 0.1, 0.3, 0.3, 0.5, 0.5],
    }
    for (m, s), c in curves.items():
        _write_run(tmp_path, m, s, c, credit=1.0 if m == "mcgpo" else 0.0, legacy=legacy)
    summary = write_report(tmp_path, baseline="grpo")
    md = (tmp_path / "results.md").read_text()
    assert (tmp_path / "curves.png").stat().st_size > 1000
    assert (tmp_path / "diagnostics.png").stat().st_size > 1000
    # Recompute from the raw files, independently of the report module.
    per = {}
    for m, s in curves:
        recs = [json.loads(x) for x in (tmp_path / "runs" / f"{m}__seed{s}" / "metrics.jsonl").read_text().splitlines()]
        ev = [r for r in recs if r.get("kind", r.get("phase")) == "eval"]
        succ = np.array([r["success"] for r in ev])
        ups = np.array([r["update"] for r in ev], dtype=float)
        per[(m, s)] = (succ[-5:].mean(), np.trapezoid(succ, ups) / (ups[-1] - ups[0]))
    rows = _table_rows(md)
    for m in ("grpo", "mcgpo"):
        l5s = [per[(m, s)][0] for s in (0, 1)]
        aucs = [per[(m, s)][1] for s in (0, 1)]
        assert rows[m][0] == f"{100 * np.mean(l5s):.1f} ± {100 * np.std(l5s, ddof=1):.1f}"
        assert rows[m][1] == f"{100 * np.mean(aucs):.1f} ± {100 * np.std(aucs, ddof=1):.1f}"
    # grpo L5: seed0 mean(.1,.2,.2,.3,.3)=.22, seed1 mean(0,.1,.2,.2,.4)=.18
    # mcgpo L5: seed0 mean(.2,.3,.4,.4,.5)=.36, seed1 mean(.1,.3,.3,.5,.5)=.34 → diffs .14, .16
    p = summary["paired"]["mcgpo"]["L5"]
    assert p["mean"] == pytest.approx(0.15)
    half = 12.706205 * np.std([0.14, 0.16], ddof=1) / math.sqrt(2)  # t(0.975, df=1) = 12.7062
    assert p["hi"] == pytest.approx(0.15 + half, rel=1e-5)
    paired_line = next(line for line in md.splitlines() if line.startswith("| mcgpo |") and "[" in line)
    assert f"| +15.0 | [{100 * (0.15 - half):+.1f}, {100 * (0.15 + half):+.1f}]" in paired_line
    # diagnostics: mcgpo pairs over updates 1..5 = 1..5 → mean 3
    assert summary["methods"]["mcgpo"]["diagnostics"]["pairs"] == pytest.approx(3.0)


def test_corrupt_and_incomplete_files_are_named(tmp_path: Path) -> None:
    d = tmp_path / "runs" / "grpo__seed0"
    d.mkdir(parents=True)
    f = d / "metrics.jsonl"
    f.write_text('{"kind": "eval", "update": 0, "success": 0.0}\n{oops\n')
    with pytest.raises(MetricFileError, match=re.escape(f"{f}:2")):
        load_run(d)
    f.write_text('{"kind": "eval", "update": 0, "success": 0.0}\n')
    with pytest.raises(MetricFileError, match="incomplete"):
        load_runs(tmp_path)
    f.write_text('{"kind": "train", "update": 1}\n{"kind": "end"}\n')
    with pytest.raises(MetricFileError, match="no evaluation"):
        load_run(d)
    with pytest.raises(MetricFileError, match="no runs folder"):
        load_runs(tmp_path / "nowhere")
