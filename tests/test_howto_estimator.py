# The steps of docs/howto/estimator.md ("Writing an estimator"), done with a toy: if this test
# fails, the how-to no longer works as written.
"""A new estimator is one module with ``@register_estimator`` plus its test.

The toy gives every step its trajectory's outcome minus the mean outcome of its group, times
``scale``: O = (10, 0) gives +5 to each step of the winner and -5 to each step of the loser.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from typer.testing import CliRunner

from rubrics.trajectory import Step, Trajectory
from wrappers.credit import available_estimators, get_estimator, unregister_estimator
from wrappers.credit.flat import flat_advantages, flat_credit

#: The module a reader writes (wrappers/credit/<name>.py in the project, or any module of theirs).
TOY = textwrap.dedent('''
    """Toy: each step gets its trajectory's outcome minus the group's mean outcome."""

    import numpy as np

    from wrappers.credit import CreditResult, Estimator, register_estimator
    from wrappers.credit.graph import RowTable


    @register_estimator("toy_centred")
    class ToyCentred(Estimator):
        """A_{i,t} = scale * (O_i - mean_j O_j), O_i = sum of trajectory i's rewards."""

        def __init__(self, *, scale: float = 1.0) -> None:
            self.scale = float(scale)

        def compute(self, groups):
            return self.compute_rows(RowTable(groups))

        def compute_rows(self, rows):
            o = rows.outcomes()
            n = np.bincount(rows.traj_group, minlength=rows.n_groups)
            mean = np.bincount(rows.traj_group, weights=o, minlength=rows.n_groups) / n
            adv = self.scale * (o - mean[rows.traj_group])[rows.traj]
            return [CreditResult(a, stats={"mean_outcome": float(m)})
                    for a, m in zip(rows.split_groups(adv), mean)]
''')


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """Step 1: write the module and import it (registration happens on import)."""
    (tmp_path / "toy_estimator.py").write_text(TOY, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("toy_estimator", None)
    module = importlib.import_module("toy_estimator")
    yield module
    unregister_estimator("toy_centred")
    sys.modules.pop("toy_estimator", None)


def _group() -> list[Trajectory]:
    win = Trajectory("t", 0, [Step("s0", "a"), Step("s1", "b", reward=10.0)], success=True)
    loss = Trajectory("t", 1, [Step("s0", "c"), Step("s2", "d"), Step("s3", "e")])
    return [win, loss]


def test_get_estimator_runs_the_toy(toy) -> None:
    """Step 2: ``get_estimator(name, **params)`` builds it; called on groups it gives credit."""
    assert "toy_centred" in available_estimators()
    res = get_estimator("toy_centred", scale=0.5)([_group()])[0]
    assert [a.tolist() for a in res.advantages] == [[2.5, 2.5], [-2.5, -2.5, -2.5]]
    assert res.stats == {"mean_outcome": 5.0}
    with pytest.raises(TypeError, match="accepted: scale"):
        get_estimator("toy_centred", gamma=0.9)


def test_flat_rows_run_the_toy_on_the_columns(toy) -> None:
    """Step 3: the flat-row path (verl/OpenRLHF/SkyRL batches) runs its ``compute_rows`` on the
    columns, rows in any order, advantages back in input order."""
    rows = [("t", "r1", "s2", 0.0, 1), ("t", "r0", "s1", 10.0, 1), ("t", "r1", "s0", 0.0, 0),
            ("t", "r0", "s0", 0.0, 0), ("t", "r1", "s3", 0.0, 2)]
    gid, tid, state, reward, index = map(list, zip(*rows))
    cols = dict(group_id=gid, traj_id=tid, state_key=state, reward=reward, step_index=index)
    adv = flat_advantages("toy_centred", **cols)
    np.testing.assert_array_equal(adv, [-5.0, 5.0, -5.0, 5.0, -5.0])
    credit = flat_credit("toy_centred", params={"scale": 2.0}, **cols)
    np.testing.assert_array_equal(credit.advantages, 2.0 * adv)
    assert credit.batch._groups is None  # the row-level path: no Trajectory was built


def test_the_arena_lists_the_toy(toy) -> None:
    """Step 4: ``rubricgym arena --list`` names every registered estimator."""
    from trainers.cli import app

    out = CliRunner().invoke(app, ["arena", "--list"])
    assert out.exit_code == 0, out.output
    line = next(x for x in out.output.splitlines() if x.startswith("estimators:"))
    assert "toy_centred" in line.split(": ", 1)[1].split(", ")


def test_one_new_file_in_the_package_is_found(tmp_path) -> None:
    """In the project an estimator is a new file in ``wrappers/credit/``: nothing lists it by
    hand.  Here the package's search path gets a folder holding the file (so the checkout is
    left alone), and a fresh ``rubricgym arena --list`` names it."""
    (tmp_path / "toy_centred.py").write_text(TOY, encoding="utf-8")
    code = (
        "import sys, wrappers.credit as credit; "
        f"credit.__path__.append({str(tmp_path)!r}); "
        "assert 'wrappers.credit.toy_centred' in credit.builtin_modules(); "
        "sys.argv = ['rubricgym', 'arena', '--list']; "
        "from trainers.cli import main; main()"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False,
                         env={"COLUMNS": "200", "PATH": ""})
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("estimators:"))
    assert "toy_centred" in line and line.startswith("estimators: grpo, ")
