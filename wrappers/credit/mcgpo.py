"""MCGPO: matched, evidence-weighted pairwise preferences on GraphGPO credit (SPEC §4.6).

MCGPO keeps GraphGPO's task credit for every row [MCGPO A.3 Eq. 12] and adds a small set
of pairwise preferences between decision rows of sibling trajectories (Match–Label–Learn,
[MCGPO §3, App. A, Algorithm 1, Table 6]).  The trainer turns each
:class:`~wrappers.credit.base.Preference` into c·softplus(−(d_θ(+) − d_θ(−))) [Eq. 6].

Matching-key convention (what environments put on every :class:`~rubrics.trajectory.Step`)
-------------------------------------------------------------------------------------------
::

    step.keys = {"exact": h_exact, "coarse": h_coarse, "signature": (C, F)}
    step.action_key = a            # the action class (SPEC §3.4)

* ``h_exact`` / ``h_coarse``: hashable pre-action state summaries of SPEC §3.4 / MCGPO
  Table 5 **without** the rubric signature;
* ``(C, F)``: the pre-action rubric signature — C the active channels, F the frontier
  (SPEC §3.2), each a hashable collection (``frozenset`` of channel names; a ``set`` is
  accepted and frozen).  The first decision's signature is the empty one.

MCGPO forms the context key itself, g = (h^ℓ, C, F) [Eq. 1], so that the ablations can
recover the parts: ``keys="state"`` uses g = h^ℓ, ``keys="rubric"`` uses g = (C, F) at both
levels (the two levels then coincide, so the exact level, tried first, decides whenever
the pair is supported), and ``shuffle_rubric=True`` permutes the (C, F) labels among all
decision rows of the group (seeded by ``shuffle_seed`` and the task id) before forming g
[MCGPO §4.3].  A group in which any step lacks a key the chosen mode needs (absent or
``None``) keeps its task credit, gets no preferences and is counted in ``stats``
(``missing_keys``) [MCGPO A.1, D.1].

Construction per group (task) and candidate fold c ∈ {0, 1} (a *direction*)
-------------------------------------------------------------------------------
* Folds by rollout slot: I_c = {i : slot_i mod 2 = c} (I₀ = {0,2,4,6}, I₁ = {1,3,5,7}).
* First visits [Eq. 9]: t_i^ℓ(g; b) = min{t ≥ b : g_{i,t}^ℓ = g}; candidates use b = 1,
  evidence b = 0.
* Candidate row pairs P_c^ℓ: first-visit rows (b = 1) of two distinct trajectories of fold
  c with the same key g at level ℓ and different action keys.
* Evidence E(g, a): trajectories of the evidence fold (fold 1−c; fold c itself with
  ``evidence="same"``) whose first visit (b = 0) to g took action a; n_a = |E(g, a)|;
  n* = min(n_a, n_b).
* Level gate [Eq. 2]: ℓ* = the first of (exact, coarse) with p ∈ P_c^ℓ and n* ≥ m
  (``min_support``); unsupported pairs are dropped, and a supported exact pair keeps the
  exact level even if its contrast then fails ε.
* Label [Eqs. 3–4]: û = p̂(g, a) − p̂(g, b), p̂ = mean success (score ≥
  ``success_threshold``) over E(g, ·); kept when |û| ≥ ε and û ≠ 0; the row whose action
  has the larger p̂ is preferred; weight c = |û|·n*/(n* + κ)·q_ℓ*.
* Selection (made deterministic): rank the qualified comparisons by
  (max(t_i, t_j) ↑, c ↓, min(t_i, t_j) ↑, lower slot ↑, higher slot ↑, step of the
  lower-slot row ↑); keep the first per sibling pair (i, j); then accept in that ranking
  while both rows are unused, up to ``max_pairs`` (2) per task and direction.
* ``weighting="uniform"`` [MCGPO C.3]: after selection every accepted pair of a direction
  gets that direction's mean weight (equal weights, original total preserved; selection
  itself is unchanged).

Because direction c reads outcomes of the evidence fold only, changing the outcomes of
fold c's trajectories leaves direction c's preferences unchanged [MCGPO A.2 Eq. 10].

Diagnostics (``CreditResult.stats``, all numbers; per group — combine a batch with
:func:`summarize_pairs`): ``missing_keys`` (0/1), ``candidate_pairs_exact`` and
``candidate_pairs_coarse`` (|P_c^ℓ| summed over directions; a row pair can count at both
levels, as in MCGPO Table 18), ``supported_pairs`` (pairs passing the support gate, each
once), ``qualified_pairs`` (also |û| ≥ ε), ``pairs``, ``pairs_exact``, ``pairs_coarse``,
``exact_share``, ``n_star_<k>`` (histogram of n* over accepted pairs), ``contrast_sum``,
``mean_contrast`` (|û|), ``weight_sum``, ``mean_weight`` (c), ``wins``/``ties``/``losses``
(preferred vs rejected candidate's own success) and ``agreement`` = (W + T/2)/(W + T + L)
[MCGPO §4.4, D.3]; means are 0 when there are no pairs.  GraphGPO's graph statistics are
included too.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, pairwise, product
from typing import Any

import numpy as np

from rubrics.trajectory import Trajectory
from wrappers.credit.base import (
    CreditInputError,
    CreditResult,
    Estimator,
    Preference,
    register_estimator,
)
from wrappers.credit.common import NORMS, check_choice
from wrappers.credit.flat import StepRows
from wrappers.credit.graph import RowTable, TransitionGraph
from wrappers.credit.graphgpo import graphgpo_graph

__all__ = [
    "KEY_MODES",
    "LEVELS",
    "MCGPO",
    "Comparison",
    "comparisons",
    "context_keys",
    "mcgpo_pairs",
    "summarize_pairs",
]

LEVELS = ("exact", "coarse")
KEY_MODES = ("joint", "state", "rubric")
EVIDENCE = ("opposite", "same")
WEIGHTING = ("evidence", "uniform")

Row = tuple[int, int]  # (trajectory index in the group, step index)


@dataclass(frozen=True)
class Comparison:
    """A supported candidate comparison before selection (see :func:`comparisons`).

    Attributes:
        rows: The two rows ``((i, t), (j, u))`` with i < j (group trajectory indices).
        fold: Candidate fold (direction) c.
        level: ℓ*, the level chosen by the support gate.
        key: The shared context key g at ℓ*.
        actions: The rows' action keys (a, b).
        contrast: Signed û = p̂(g, a) − p̂(g, b).
        support: n* = min(n_a, n_b).
        weight: c = |û|·n*/(n* + κ)·q_ℓ*.
        qualified: |û| ≥ ε and û ≠ 0.
    """

    rows: tuple[Row, Row]
    fold: int
    level: str
    key: Hashable
    actions: tuple[Hashable, Hashable]
    contrast: float
    support: int
    weight: float
    qualified: bool


def _where(g: int | None, i: int, t: int) -> str:
    return (f"group {g}, " if g is not None else "") + f"trajectory {i}, step {t}"


def _freeze(value: Any, what: str) -> Hashable:
    """``value`` as a hashable key (a ``set`` is frozen); anything else unhashable is an error."""
    try:
        hash(value)
        return value
    except TypeError:
        if isinstance(value, set):
            return _freeze(frozenset(value), what)
        raise CreditInputError(
            f"{what} is not hashable ({type(value).__name__}): {value!r}"
        ) from None


def _signature(sig: Any, g: int | None, i: int, t: int) -> tuple[Hashable, Hashable]:
    """Validate one ``keys["signature"]`` and return it as a hashable (C, F) pair."""
    if type(sig) is tuple and len(sig) == 2:
        try:
            hash(sig)
            return sig
        except TypeError:
            pass
    where = _where(g, i, t)
    if isinstance(sig, (str, bytes)) or not isinstance(sig, Sequence) or len(sig) != 2:
        raise CreditInputError(f"{where}: keys['signature'] must be a (C, F) pair, got {sig!r}")
    return (_freeze(sig[0], f"{where}: signature C"), _freeze(sig[1], f"{where}: signature F"))


#: The matching keys each mode reads from ``Step.keys``.
_KEY_NAMES = {"joint": ("exact", "coarse", "signature"), "state": ("exact", "coarse"), "rubric": ("signature",)}


@dataclass
class _GroupRows:
    """What the preferences read of one group: its rows in trajectory, then step order."""

    lengths: list[int]  # steps per trajectory
    slots: list[int]
    scores: list[float]
    task_id: Hashable  # of the group's first trajectory (seeds the rubric shuffle)
    action: list[Hashable]  # action key per row
    keys: dict[str, list[Any]]  # matching key name -> value per row (None: absent)

    @classmethod
    def of_group(cls, group: Sequence[Trajectory], keys: str) -> _GroupRows:
        return next(_batch_rows(RowTable.from_columns(StepRows.of_groups([group])), keys))


def _batch_rows(rows: RowTable, keys: str) -> Iterator[_GroupRows]:
    """The :class:`_GroupRows` of every group of a table of :class:`~wrappers.credit.flat.StepRows`."""
    cols = rows.columns
    if not isinstance(cols, StepRows):
        raise TypeError("MCGPO reads matching keys and slots: build the table from StepRows "
                        "(RowTable.from_columns(StepRows.of_groups(groups)) or flat rows)")
    slots, scores, task_ids = (cols.traj_column(name) for name in ("slot", "score", "task_id"))
    lengths = np.diff(rows.offsets).tolist()
    for g, (t0, t1) in enumerate(pairwise(rows.group_traj.tolist())):
        step, key_cols = cols.group_columns(g, ("action_key",), _KEY_NAMES[keys])
        yield _GroupRows(lengths[t0:t1], slots[t0:t1], scores[t0:t1], task_ids[t0] if t1 > t0 else None,
                         step["action_key"], key_cols)


def context_keys(
    group: Sequence[Trajectory],
    keys: str = "joint",
    *,
    shuffle_rubric: bool = False,
    shuffle_seed: int = 0,
    group_index: int | None = None,
) -> dict[str, list[list[Hashable]]] | None:
    """The context key g^ℓ_{i,t} of every row at both levels [MCGPO Eq. 1].

    Args:
        group: The task's sibling trajectories.
        keys: ``"joint"`` (g = (h, C, F)), ``"state"`` (g = h) or ``"rubric"`` (g = (C, F)).
        shuffle_rubric: Permute the (C, F) labels among all rows of the group first.
        shuffle_seed: Seed of that permutation (combined with the task id).
        group_index: Only used to name the group in error messages.

    Returns:
        ``{level: [[g per step] per trajectory]}``, or ``None`` when a step lacks a key
        the mode needs (see the module docstring's convention).

    Raises:
        CreditInputError: a key is not hashable, or a signature is not a (C, F) pair.
    """
    check_choice("keys", keys, KEY_MODES)
    prep = _prepared(_GroupRows.of_group(group, keys), keys, shuffle_rubric, shuffle_seed, group_index)
    if prep is None:
        return None
    return {lv: [[prep.keys[lv][g] for g in per] for per in prep.ids[lv]] for lv in LEVELS}


def _first_visits(keys_i: Sequence[int], b: int) -> dict[int, int]:
    """t_i(g; b) = min{t ≥ b : g_t = g} for every key g of one trajectory [Eq. 9].

    Keys are inserted walking backwards (the earliest visit is written last), so the dict
    lists them by their last visit, latest first; that order fixes the order of
    :func:`comparisons`.
    """
    n = len(keys_i)
    return dict(zip(reversed(keys_i), range(n - 1, b - 1, -1)))  # zip stops before t < b


@dataclass
class _Prepared:
    """Per-group lookups shared by both directions (keys interned to ints)."""

    keys: dict[str, list[Hashable]]  # level -> key of each interned id
    ids: dict[str, list[list[int]]]  # level -> per trajectory the id of each step's key
    first_ev: dict[str, list[dict[int, int]]]  # level -> per trajectory {id: first t >= 0}
    first_cand: dict[str, list[dict[int, int]]]  # level -> per trajectory {id: first t >= 1}
    action: list[list[Hashable]]
    fold: list[int]


def _intern(values: list[Hashable]) -> tuple[list[int], list[Hashable]]:
    """Ids in order of first appearance, and the distinct values (raises TypeError if unhashable)."""
    uniq = list(dict.fromkeys(values))
    index = dict(zip(uniq, range(len(uniq))))
    return list(map(index.__getitem__, values)), uniq


def _intern_well_formed(values: list[Any], pair: bool) -> tuple[list[int], list[Hashable]] | None:
    """:func:`_intern` of a key column whose values are all present and hashable (``pair``:
    and (C, F) tuples), else None."""
    try:
        ids, uniq = _intern(values)
    except TypeError:
        return None
    if any(u is None or (pair and (type(u) is not tuple or len(u) != 2)) for u in uniq):
        return None
    return ids, uniq


def _checked_keys(rows: _GroupRows, names: Sequence[str], group_index: int | None) -> dict[str, list[Hashable]] | None:
    """The key columns row by row: None at the first row that lacks a key, else the values
    with sets frozen and signatures as (C, F) tuples; a malformed key raises, naming its row."""
    out: dict[str, list[Hashable]] = {name: [] for name in names}
    need_h, need_sig = "exact" in out, "signature" in out
    r = 0
    for i, n in enumerate(rows.lengths):
        for t in range(n):
            if need_h:
                he, hc = rows.keys["exact"][r], rows.keys["coarse"][r]
                if he is None or hc is None:
                    return None
                out["exact"].append(_freeze(he, f"{_where(group_index, i, t)}: keys['exact']"))
                out["coarse"].append(_freeze(hc, f"{_where(group_index, i, t)}: keys['coarse']"))
            if need_sig:
                sig = rows.keys["signature"][r]
                if sig is None:
                    return None
                out["signature"].append(_signature(sig, group_index, i, t))
            r += 1
    return out


def _components(rows: _GroupRows, keys: str, group_index: int | None) -> dict[str, tuple[list[int], list[Hashable]]] | None:
    """The interned key components the mode needs, or None when a row lacks one (the
    components are checked row by row, naming the problem, only when one is not well formed)."""
    names = _KEY_NAMES[keys]
    out = {}
    for name in names:
        interned = _intern_well_formed(rows.keys[name], name == "signature")
        if interned is None:
            break
        out[name] = interned
    else:
        return out
    checked = _checked_keys(rows, names, group_index)
    return None if checked is None else {name: _intern(checked[name]) for name in names}


def _level_ids(comps: Mapping[str, tuple[list[int], list[Hashable]]], keys: str, lv: str
               ) -> tuple[list[int], list[Hashable]]:
    """Ids of the context key g at level ``lv`` per row, and the key of each id: the
    components are interned separately and combined in row order, so the first appearance of
    a key is the first appearance of its combination."""
    if keys == "state":
        return comps[lv]
    sg_ids, sg_u = comps["signature"]
    if keys == "rubric":
        ids, codes = _intern(sg_ids)
        return ids, [sg_u[code] for code in codes]
    h_ids, h_u = comps[lv]
    ids, combos = _intern(list(zip(h_ids, sg_ids)))
    return ids, [(h_u[h], *sg_u[c]) for h, c in combos]


def _split(values: list[Any], lengths: Sequence[int]) -> list[list[Any]]:
    out, k0 = [], 0
    for n in lengths:
        out.append(values[k0 : k0 + n])
        k0 += n
    return out


def _prepared(
    rows: _GroupRows,
    keys: str,
    shuffle_rubric: bool,
    shuffle_seed: int,
    group_index: int | None,
) -> _Prepared | None:
    """The group's :class:`_Prepared`, or ``None`` when keys are missing (see
    :func:`context_keys`, which this computes)."""
    comps = _components(rows, keys, group_index)
    if comps is None:
        return None
    if "signature" in comps and shuffle_rubric and rows.action:
        seed = [int(shuffle_seed) & 0xFFFFFFFF, zlib.crc32(repr(rows.task_id).encode("utf-8"))]
        perm = np.random.default_rng(seed).permutation(len(rows.action))
        sg_ids, sg_u = comps["signature"]
        comps["signature"] = ([sg_ids[p] for p in perm.tolist()], sg_u)
    out_keys: dict[str, list[Hashable]] = {}
    ids: dict[str, list[list[int]]] = {}
    first_ev: dict[str, list[dict[int, int]]] = {}
    first_cand: dict[str, list[dict[int, int]]] = {}
    for lv in LEVELS:
        level_ids, out_keys[lv] = _level_ids(comps, keys, lv)
        ids[lv] = _split(level_ids, rows.lengths)
        first_ev[lv] = [_first_visits(per, 0) for per in ids[lv]]
        first_cand[lv] = [_first_visits(per, 1) for per in ids[lv]]
    return _Prepared(out_keys, ids, first_ev, first_cand, _split(rows.action, rows.lengths),
                     [s % 2 for s in rows.slots])


@dataclass(frozen=True)
class _Gate:
    """The support gate and label parameters of one level [Eqs. 2–4]."""

    min_support: int
    epsilon: float
    kappa: float
    q: float

    def label(self, na: list[float] | None, nb: list[float] | None) -> tuple[float, int, float, bool] | None:
        """(û, n*, c, qualified) of actions a, b from their evidence cells [n, successes],
        or None when the pair is unsupported."""
        if na is None or nb is None:
            return None
        n_star = int(min(na[0], nb[0]))
        if n_star < self.min_support:  # support gate
            return None
        u_ab = na[1] / na[0] - nb[1] / nb[0]  # û for (a, b) [Eq. 3]
        weight = float(abs(u_ab) * n_star / (n_star + self.kappa) * self.q)  # [Eq. 4]
        return u_ab, n_star, weight, bool(abs(u_ab) >= self.epsilon and u_ab != 0.0)


def _candidate_rows(g: int, cand: Sequence[int], firsts: Sequence[dict[int, int]],
                    action: Sequence[Sequence[Hashable]]) -> dict[Hashable, list[Row]]:
    """Candidate rows (first visits with b = 1) of key g by action, trajectory ascending."""
    by_act: dict[Hashable, list[Row]] = {}
    for i, first in zip(cand, firsts):
        t = first.get(g)
        if t is not None:
            rows_a = by_act.get(action[i][t])
            if rows_a is None:
                by_act[action[i][t]] = [(i, t)]
            else:
                rows_a.append((i, t))
    return by_act


def _evidence(g: int, evidence: Sequence[tuple[dict[int, int], Sequence[Hashable], float]]
              ) -> dict[Hashable, list[float]]:
    """E(g, ·): action -> [n_a, successes] over the evidence fold's first visits (b = 0)."""
    tab: dict[Hashable, list[float]] = {}
    for first, act, y in evidence:
        t = first.get(g)
        if t is not None:
            cell = tab.get(act[t])
            if cell is None:
                tab[act[t]] = [1, y]
            else:
                cell[0] += 1
                cell[1] += y
    return tab


def _key_comparisons(key: Hashable, by_act: Mapping[Hashable, list[Row]], tab: Mapping[Hashable, list[float]],
                     lv: str, c: int, gate: _Gate, decided: set[tuple[Row, Row]], out: list[Comparison]) -> int:
    """Append the supported comparisons of one key (every action pair, every row pair) to
    ``out``; returns the number of candidate row pairs.  A row pair the exact level decided
    is not revisited at the coarse level [Eq. 2]."""
    acts = list(by_act)
    n_cand = 0
    for x, a in enumerate(acts):
        for b in acts[x + 1 :]:
            n_cand += len(by_act[a]) * len(by_act[b])
            label = gate.label(tab.get(a), tab.get(b))
            if label is None:
                continue
            u_ab, n_star, weight, qualified = label
            for ra, rb in product(by_act[a], by_act[b]):
                if ra[0] < rb[0]:
                    rows, acts_ab, u_hat = (ra, rb), (a, b), u_ab
                else:
                    rows, acts_ab, u_hat = (rb, ra), (b, a), -u_ab
                if lv == "exact":
                    decided.add(rows)
                elif rows in decided:
                    continue
                out.append(Comparison(rows, c, lv, key, acts_ab, float(u_hat), n_star, weight, qualified))
    return n_cand


def _comparisons(
    prep: _Prepared,
    c: int,
    success: np.ndarray,
    *,
    min_support: int,
    epsilon: float,
    kappa: float,
    q: Mapping[str, float],
    evidence: str,
) -> tuple[dict[str, int], list[Comparison]]:
    """Supported comparisons of direction c, and the candidate row pairs |P_c^ℓ| per level.

    Rows are grouped by (key, action), so the support gate and the label are evaluated once
    per action pair of a key; a row pair supported at the exact level is never revisited at
    the coarse level [Eq. 2].  Only keys first-visited by two or more candidate
    trajectories can form a pair, so only their rows and evidence are gathered.
    """
    n = len(prep.fold)
    ev_fold = 1 - c if evidence == "opposite" else c
    cand = [i for i in range(n) if prep.fold[i] == c]
    evid = [i for i in range(n) if prep.fold[i] == ev_fold]
    ys = [float(y) for y in success.tolist()]
    counts = {lv: 0 for lv in LEVELS}
    decided: set[tuple[Row, Row]] = set()
    out: list[Comparison] = []
    for lv in LEVELS:
        gate = _Gate(min_support, epsilon, kappa, q[lv])
        fc = [prep.first_cand[lv][i] for i in cand]
        fe = [(prep.first_ev[lv][e], prep.action[e], ys[e]) for e in evid]
        # keys in order of first appearance over the candidates (i ascending, dict order)
        for g, k in Counter(chain.from_iterable(fc)).items():
            if k < 2:
                continue
            by_act = _candidate_rows(g, cand, fc, prep.action)
            if len(by_act) >= 2:
                tab = _evidence(g, fe)
                counts[lv] += _key_comparisons(prep.keys[lv][g], by_act, tab, lv, c, gate, decided, out)
    return counts, out


def _select(slot: Sequence[int], comps: Iterable[Comparison], max_pairs: int) -> list[Comparison]:
    """Earliest qualified comparison per sibling pair, then the disjoint allocator
    (``slot``: the rollout slot of each trajectory of the group)."""

    def rank(cmp: Comparison) -> tuple[Any, ...]:
        (i, t), (j, u) = cmp.rows
        lo_row = (i, t) if slot[i] < slot[j] else (j, u)
        return (
            max(t, u),
            -cmp.weight,
            min(t, u),
            min(slot[i], slot[j]),
            max(slot[i], slot[j]),
            lo_row[1],
        )

    ranked = sorted((cmp for cmp in comps if cmp.qualified), key=rank)
    seen: set[tuple[int, int]] = set()
    firsts = []
    for cmp in ranked:
        sib = (cmp.rows[0][0], cmp.rows[1][0])
        if sib not in seen:
            seen.add(sib)
            firsts.append(cmp)
    used: set[Row] = set()
    accepted = []
    for cmp in firsts:
        if len(accepted) >= max_pairs:
            break
        if cmp.rows[0] in used or cmp.rows[1] in used:
            continue
        used.update(cmp.rows)
        accepted.append(cmp)
    return accepted


def _empty_stats() -> dict[str, float]:
    """The diagnostics of a group before any pair is counted (see the module docstring)."""
    return {
        "missing_keys": 0,
        "candidate_pairs_exact": 0,
        "candidate_pairs_coarse": 0,
        "supported_pairs": 0,
        "qualified_pairs": 0,
        "pairs": 0,
        "pairs_exact": 0,
        "pairs_coarse": 0,
        "exact_share": 0.0,
        "n_star_1": 0,
        "n_star_2": 0,
        "contrast_sum": 0.0,
        "mean_contrast": 0.0,
        "weight_sum": 0.0,
        "mean_weight": 0.0,
        "wins": 0,
        "ties": 0,
        "losses": 0,
        "agreement": 0.0,
    }


def _preferences(accepted: Sequence[Comparison], c: int, weighting: str) -> list[Preference]:
    """The accepted comparisons of direction c as preferences (the row with the better
    action preferred), weighted as ``weighting`` says."""
    weights = [cmp.weight for cmp in accepted]
    if weighting == "uniform" and accepted:
        weights = [float(np.mean(weights))] * len(accepted)
    prefs = []
    for cmp, w in zip(accepted, weights):
        first, second = cmp.rows
        pref, rej = (first, second) if cmp.contrast > 0 else (second, first)
        prefs.append(Preference(preferred=pref, rejected=rej, weight=float(w), level=cmp.level,
                                contrast=abs(cmp.contrast), support=cmp.support, fold=c))
    return prefs


def _tally(stats: dict[str, float], prefs: Sequence[Preference], success: np.ndarray) -> None:
    """Add the accepted preferences' counts, sums and means to ``stats``."""
    for p in prefs:
        stats["pairs"] += 1
        stats["pairs_exact" if p.level == "exact" else "pairs_coarse"] += 1
        stats[f"n_star_{p.support}"] = stats.get(f"n_star_{p.support}", 0) + 1
        stats["contrast_sum"] += p.contrast
        stats["weight_sum"] += p.weight
        yp, yr = success[p.preferred[0]], success[p.rejected[0]]
        stats["wins" if yp > yr else "ties" if yp == yr else "losses"] += 1
    if prefs:
        n = len(prefs)
        stats["exact_share"] = stats["pairs_exact"] / n
        stats["mean_contrast"] = stats["contrast_sum"] / n
        stats["mean_weight"] = stats["weight_sum"] / n
        stats["agreement"] = (stats["wins"] + stats["ties"] / 2) / n


def _pairs(
    rows: _GroupRows,
    *,
    min_support: int,
    epsilon: float,
    kappa: float,
    q_exact: float,
    q_coarse: float,
    max_pairs: int,
    success_threshold: float,
    evidence: str,
    weighting: str,
    keys: str,
    shuffle_rubric: bool,
    shuffle_seed: int,
    group_index: int | None,
) -> tuple[list[Preference], dict[str, float]]:
    """:func:`mcgpo_pairs` of one group's rows (parameters already checked)."""
    stats = _empty_stats()
    prep = _prepared(rows, keys, shuffle_rubric, shuffle_seed, group_index)
    if prep is None:
        stats["missing_keys"] = 1
        return [], stats
    success = np.array([s >= success_threshold for s in rows.scores], dtype=bool)
    q = {"exact": float(q_exact), "coarse": float(q_coarse)}
    prefs: list[Preference] = []
    for c in (0, 1):
        n_cand, comps = _comparisons(
            prep, c, success, min_support=min_support, epsilon=epsilon, kappa=kappa, q=q, evidence=evidence
        )
        stats["candidate_pairs_exact"] += n_cand["exact"]
        stats["candidate_pairs_coarse"] += n_cand["coarse"]
        stats["supported_pairs"] += len(comps)
        stats["qualified_pairs"] += sum(cmp.qualified for cmp in comps)
        prefs += _preferences(_select(rows.slots, comps, max_pairs), c, weighting)
    _tally(stats, prefs, success)
    return prefs, stats


def mcgpo_pairs(
    group: Sequence[Trajectory],
    *,
    min_support: int = 1,
    epsilon: float = 0.10,
    kappa: float = 2.0,
    q_exact: float = 1.0,
    q_coarse: float = 0.7,
    max_pairs: int = 2,
    success_threshold: float = 0.999,
    evidence: str = "opposite",
    weighting: str = "evidence",
    keys: str = "joint",
    shuffle_rubric: bool = False,
    shuffle_seed: int = 0,
    group_index: int | None = None,
) -> tuple[list[Preference], dict[str, float]]:
    """MCGPO's preferences for one group (Match and Label of Algorithm 1; no task credit).

    Parameters are those of :class:`MCGPO`; ``group_index`` only names the group in errors.

    Returns:
        The accepted preferences (direction 0 first, each in acceptance order) and the
        group's diagnostics (see the module docstring).

    Example (one key, fold 0 rows take a / b at t = 1; fold 1 evidence: a wins, b loses;
    û = 1 − 0 = 1, n* = 1, c = 1·1/(1+2)·1 = 1/3):
        >>> from rubrics.trajectory import Step, Trajectory
        >>> def st(a, h="h"):
        ...     return Step("s", a, keys={"exact": h, "coarse": h, "signature": ((), ())})
        >>> g = [Trajectory("t", 0, [st("x", "start"), st("a")]),
        ...      Trajectory("t", 1, [st("a")], score=1.0),
        ...      Trajectory("t", 2, [st("x", "start"), st("b")]),
        ...      Trajectory("t", 3, [st("b")], score=0.0)]
        >>> pairs, stats = mcgpo_pairs(g)
        >>> [(p.preferred, p.rejected, round(p.weight, 4), p.level, p.support, p.fold) for p in pairs]
        [((0, 1), (2, 1), 0.3333, 'exact', 1, 0)]
    """
    check_choice("evidence", evidence, EVIDENCE)
    check_choice("weighting", weighting, WEIGHTING)
    check_choice("keys", keys, KEY_MODES)
    return _pairs(
        _GroupRows.of_group(group, keys),
        min_support=min_support,
        epsilon=epsilon,
        kappa=kappa,
        q_exact=q_exact,
        q_coarse=q_coarse,
        max_pairs=max_pairs,
        success_threshold=success_threshold,
        evidence=evidence,
        weighting=weighting,
        keys=keys,
        shuffle_rubric=shuffle_rubric,
        shuffle_seed=shuffle_seed,
        group_index=group_index,
    )


def comparisons(
    group: Sequence[Trajectory],
    *,
    min_support: int = 1,
    epsilon: float = 0.10,
    kappa: float = 2.0,
    q_exact: float = 1.0,
    q_coarse: float = 0.7,
    success_threshold: float = 0.999,
    evidence: str = "opposite",
    keys: str = "joint",
    shuffle_rubric: bool = False,
    shuffle_seed: int = 0,
) -> list[Comparison]:
    """Every supported comparison of a group (both directions), before ε and selection.

    The inspection view of :func:`mcgpo_pairs`: ``qualified`` marks those that pass ε;
    :func:`mcgpo_pairs` then selects among the qualified ones.  Returns ``[]`` for a group
    with missing keys.
    """
    check_choice("evidence", evidence, EVIDENCE)
    check_choice("keys", keys, KEY_MODES)
    rows = _GroupRows.of_group(group, keys)
    prep = _prepared(rows, keys, shuffle_rubric, shuffle_seed, None)
    if prep is None:
        return []
    success = np.array([s >= success_threshold for s in rows.scores], dtype=bool)
    q = {"exact": float(q_exact), "coarse": float(q_coarse)}
    out: list[Comparison] = []
    for c in (0, 1):
        out += _comparisons(
            prep, c, success, min_support=min_support, epsilon=epsilon, kappa=kappa, q=q, evidence=evidence
        )[1]
    return out


def summarize_pairs(results: Sequence[CreditResult]) -> dict[str, float]:
    """Batch-level MCGPO diagnostics from per-group results [MCGPO §4.4, App. C.5, D.3].

    Returns:
        ``pairs`` (per update), ``pairs_exact``, ``exact_share``, ``n_star_<k>`` counts,
        ``mean_contrast``, ``mean_weight`` (pair-weighted means), ``wins``, ``ties``,
        ``losses``, ``agreement`` = (W + T/2)/(W + T + L), ``groups``,
        ``groups_with_pairs`` and ``groups_missing_keys``.
    """
    out: dict[str, float] = {
        "groups": len(results),
        "groups_with_pairs": 0,
        "groups_missing_keys": 0,
        "pairs": 0,
        "pairs_exact": 0,
        "wins": 0,
        "ties": 0,
        "losses": 0,
    }
    contrast = weight = 0.0
    for r in results:
        s = r.stats
        out["groups_missing_keys"] += int(s.get("missing_keys", 0))
        out["groups_with_pairs"] += int(s.get("pairs", 0) > 0)
        for k in ("pairs", "pairs_exact", "wins", "ties", "losses"):
            out[k] += s.get(k, 0)
        for k, v in s.items():
            if k.startswith("n_star_"):
                out[k] = out.get(k, 0) + v
        contrast += s.get("contrast_sum", 0.0)
        weight += s.get("weight_sum", 0.0)
    n = out["pairs"]
    out["exact_share"] = out["pairs_exact"] / n if n else 0.0
    out["mean_contrast"] = contrast / n if n else 0.0
    out["mean_weight"] = weight / n if n else 0.0
    out["agreement"] = (out["wins"] + out["ties"] / 2) / n if n else 0.0
    return out


@register_estimator("mcgpo")
class MCGPO(Estimator):
    """Multi-Criteria Grouped Preference Optimisation credit [MCGPO §3, App. A, Table 6].

    ``advantages`` are GraphGPO's task credit; ``pairs`` the accepted preferences.

    Args:
        min_support: m, minimum balanced support n* (1).
        epsilon: ε, minimum |û| (0.10).
        kappa: κ, support shrinkage (2).
        q_exact, q_coarse: Resolution weights q_ℓ (1, 0.7).
        max_pairs: Accepted pairs per task and direction (2).
        success_threshold: Terminal success is ``Trajectory.score ≥`` this (0.999).
        evidence: ``"opposite"`` (other fold, default) or ``"same"`` (the candidates' own
            fold, candidates included) [MCGPO Table 2b].
        weighting: ``"evidence"`` (c as above) or ``"uniform"`` (each direction's mean c).
        keys: ``"joint"`` (h, C, F), ``"state"`` (h) or ``"rubric"`` ((C, F)).
        shuffle_rubric: Permute (C, F) among the group's rows (needs C, F in the key).
        shuffle_seed: Seed of the permutation.
        gamma, success_reward, unreachable, norm, step_weight, episode_weight,
            episode_norm: GraphGPO task-credit parameters (see
            :class:`~wrappers.credit.graphgpo.GraphGPO`; γ = 0.1 ALFWorld, 0.2 WebShop).
    """

    def __init__(
        self,
        *,
        min_support: int = 1,
        epsilon: float = 0.10,
        kappa: float = 2.0,
        q_exact: float = 1.0,
        q_coarse: float = 0.7,
        max_pairs: int = 2,
        success_threshold: float = 0.999,
        evidence: str = "opposite",
        weighting: str = "evidence",
        keys: str = "joint",
        shuffle_rubric: bool = False,
        shuffle_seed: int = 0,
        gamma: float = 0.1,
        success_reward: float = 10.0,
        unreachable: str = "max_plus_one",
        norm: str = "mean_std",
        step_weight: float = 1.0,
        episode_weight: float = 1.0,
        episode_norm: str = "rows",
    ) -> None:
        check_choice("evidence", evidence, EVIDENCE)
        check_choice("weighting", weighting, WEIGHTING)
        check_choice("keys", keys, KEY_MODES)
        check_choice("norm", norm, NORMS)
        if isinstance(min_support, bool) or int(min_support) != min_support or min_support < 1:
            raise ValueError(f"min_support must be an integer >= 1, got {min_support!r}")
        if isinstance(max_pairs, bool) or int(max_pairs) != max_pairs or max_pairs < 0:
            raise ValueError(f"max_pairs must be an integer >= 0, got {max_pairs!r}")
        for name, value in (
            ("epsilon", epsilon),
            ("kappa", kappa),
            ("q_exact", q_exact),
            ("q_coarse", q_coarse),
        ):
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if shuffle_rubric and keys == "state":
            raise ValueError(
                "shuffle_rubric=True has no effect with keys='state' (the key has no (C, F))"
            )
        self.min_support = int(min_support)
        self.epsilon = float(epsilon)
        self.kappa = float(kappa)
        self.q_exact = float(q_exact)
        self.q_coarse = float(q_coarse)
        self.max_pairs = int(max_pairs)
        self.success_threshold = float(success_threshold)
        self.evidence = evidence
        self.weighting = weighting
        self.keys = keys
        self.shuffle_rubric = bool(shuffle_rubric)
        self.shuffle_seed = int(shuffle_seed)
        self.gamma = float(gamma)
        self.success_reward = float(success_reward)
        self.unreachable = unreachable
        self.norm = norm
        self.step_weight = float(step_weight)
        self.episode_weight = float(episode_weight)
        self.episode_norm = episode_norm
        # Validate the task-credit parameters now rather than on the first batch.
        from wrappers.credit.graphgpo import GraphGPO

        GraphGPO(
            gamma=gamma,
            success_reward=success_reward,
            unreachable=unreachable,
            norm=norm,
            step_weight=step_weight,
            episode_weight=episode_weight,
            episode_norm=episode_norm,
        )

    def pair_params(self) -> dict[str, Any]:
        """The keyword arguments this estimator passes to :func:`mcgpo_pairs`."""
        return {
            "min_support": self.min_support,
            "epsilon": self.epsilon,
            "kappa": self.kappa,
            "q_exact": self.q_exact,
            "q_coarse": self.q_coarse,
            "max_pairs": self.max_pairs,
            "success_threshold": self.success_threshold,
            "evidence": self.evidence,
            "weighting": self.weighting,
            "keys": self.keys,
            "shuffle_rubric": self.shuffle_rubric,
            "shuffle_seed": self.shuffle_seed,
        }

    def compute(self, groups: Sequence[Sequence[Trajectory]]) -> list[CreditResult]:
        """Credit for validated groups: :meth:`compute_rows` on their rows."""
        return self.compute_rows(TransitionGraph.from_columns(StepRows.of_groups(groups)))

    def compute_rows(self, rows: RowTable) -> list[CreditResult]:
        """Credit for a :class:`~wrappers.credit.graph.RowTable` of
        :class:`~wrappers.credit.flat.StepRows`: GraphGPO task credit for the whole batch in
        one vectorised pass, then the preferences group by group."""
        g = rows if isinstance(rows, TransitionGraph) else TransitionGraph.from_columns(rows.columns)
        credits = graphgpo_graph(
            g,
            gamma=self.gamma,
            success_reward=self.success_reward,
            unreachable=self.unreachable,
            norm=self.norm,
            step_weight=self.step_weight,
            episode_weight=self.episode_weight,
            episode_norm=self.episode_norm,
        )
        results = []
        params = self.pair_params()
        for k, (group_rows, task) in enumerate(zip(_batch_rows(g, self.keys), credits)):
            pairs, stats = _pairs(group_rows, group_index=k, **params)
            results.append(
                CreditResult(
                    task.advantages,
                    shaped_rewards=task.returns,
                    pairs=pairs,
                    stats={**task.stats, **stats},
                )
            )
        return results
