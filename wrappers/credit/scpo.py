"""SCPO: semantic-consistency step credit on top of GiGPO (SPEC §4.5) [SCPO §3, App. B].

For every group with at least one success SCPO picks a *success reference* and gives the
steps of each failed sibling a non-negative auxiliary reward for new progress along it:

1. **Reference** [SCPO §3.2]: successful siblings S = {i : O_i > τ_succ} (O_i = Σ_t reward,
   τ_succ = ``success_threshold``: 0 for ALFWorld's binary reward, 9.0 for WebShop's
   10-point scale); the reference τ* = argmax_{i∈S} |τ_i| (the longest; ties → the first
   trajectory of the group).  Groups with S = ∅ (or no failed sibling) are left unshaped.
   (SPEC §4.5 says "score > τ_succ"; the paper's R(τ) is the summed task reward, which
   is what τ_succ = 9.0 on WebShop's 10-point scale refers to, so we compare O_i.)
2. **Step text** [SCPO App. A.5]: x_t = ``action ‖ feedback`` (the action and the
   observation it produced, :func:`step_text`).  Invalid actions (``Step.valid`` false) and
   no-op feedback ("Nothing happens.", :data:`NOOP_FEEDBACK`) are filtered out, giving a
   filtered reference of length m and, per failed sibling w, ℓ filtered steps.
3. **Similarities** [SCPO §3.3]: a frozen scorer (:mod:`wrappers.credit.scorers`) gives
   M ∈ [0,1]^{m×ℓ}, M_{u,v} = f(x*_u, x^w_v), and the self-similarity M* ∈ [0,1]^{m×m}.  All
   matrices of a batch are requested in one scorer call.
4. **Monotonic credit** [SCPO App. B.2, Alg. 2]: :func:`monotonic_credit`.  Each reference
   position is credited at most once and the credited frontier only moves forward.
5. **Integration** [SCPO §3.5, Eqs. 4–5]: R̃_t = R_t + α·r^SCPO_t on failed siblings only
   (added at the step where it is earned, not discounted backwards); only GiGPO's step term
   sees R̃:  Ã = episode_weight·A_E + step_weight·Norm_anchor(R̃).  The episode term is
   unshaped, so SCPO cannot turn a failure into a success.

Processing order π [SCPO §3.4, App. B.2] (``order``):

* ``"chronological"`` — π = (0, …, ℓ−1), the paper's ablation (``balance_batch=False``).
* ``"length"`` (default) — the order a token-balancing batcher leaves the batch in, which
  the paper reuses as its permutation (verl's ``balance_batch``).  We reproduce such a
  batcher deterministically (:func:`length_balanced_order`): all rows of the batch are
  split into ``partitions`` equal-count parts by greedy longest-first balancing of their
  lengths, each part keeps its rows in batch order, parts are concatenated; π visits a
  failed sibling's steps in that order.  Row length = ``Step.extra["num_tokens"]`` when the
  trainer recorded it, else ``len(observation) + len(action)`` characters.  (verl uses a
  Karmarkar–Karp partitioner over token counts; the exact partition differs, the property
  the paper relies on — a permutation decoupled from time — is the same.)
* ``"random"`` — a seeded permutation per (``seed``, task, slot).

Diagnostics (``CreditResult.stats``): ``has_reference`` (0/1), ``failed_trajectories``,
``credited_steps``, ``credited_steps_per_failed``, ``aux_reward_sum`` and
``mean_aux_reward`` (α·r^SCPO summed / averaged over all steps of the failed siblings),
``filtered_steps`` and ``batch_scorer_seconds`` (wall time of the batch's one scorer
call, repeated in every group of the batch), plus GiGPO's anchor statistics; all values
are numbers.  ``CreditResult.shaped_rewards`` holds R̃ per trajectory; the per-step
r^SCPO, the matrices and the credited cells are in :meth:`SCPO.traces`.
"""

from __future__ import annotations

import heapq
import math
import time
import zlib
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from rubrics.trajectory import Step, Trajectory
from wrappers.credit.base import CreditResult, Estimator, register_estimator
from wrappers.credit.common import NORMS, check_choice, normalize
from wrappers.credit.flat import StepRows
from wrappers.credit.gigpo import gigpo_step_rows
from wrappers.credit.graph import RowTable
from wrappers.credit.scorers import PairScorer, check_scorer_spec, make_scorer

__all__ = [
    "NOOP_FEEDBACK",
    "ORDERS",
    "SCPO",
    "MatchTrace",
    "failure_table",
    "kept_steps",
    "length_balanced_order",
    "monotonic_credit",
    "monotonic_match",
    "scpo_traces",
    "step_text",
]

ORDERS = ("chronological", "length", "random")
#: Feedback texts (compared stripped and lower-cased) that mark a no-op step [SCPO App. A.5].
NOOP_FEEDBACK = frozenset({"nothing happens.", "nothing happens"})


# --- the matcher -----------------------------------------------------------------------
def failure_table(M_self: np.ndarray, theta: float) -> np.ndarray:
    """The semantic KMP prefix function over reference positions [SCPO App. B.2].

    Equality of reference positions a, b is ``M_self[a, b] ≥ θ``.  Built exactly as the
    classical prefix function::

        fail[0] = 0; k = 0
        for q in 1..m−1:
            while k > 0 and not eq(k, q): k = fail[k−1]
            if eq(k, q): k += 1
            fail[q] = k

    ``fail[q]`` is the length of the longest proper prefix of positions 0..q that is also
    a suffix of them (under ≈).  The matcher's backtrack is ``next(j) = fail[j] − 1``.

    Example (positions 0 and 2 are alike, 1 differs: "aba" → [0, 0, 1]):
        >>> S = np.array([[1, 0, .9], [0, 1, 0], [.9, 0, 1]])
        >>> failure_table(S, 0.6).tolist()
        [0, 0, 1]
    """
    M_self = np.asarray(M_self, dtype=np.float64)
    m = M_self.shape[0]
    fail = np.zeros(m, dtype=np.intp)
    k = 0
    for q in range(1, m):
        while k > 0 and not M_self[k, q] >= theta:
            k = int(fail[k - 1])
        if M_self[k, q] >= theta:
            k += 1
        fail[q] = k
    return fail


def _check_matcher_args(
    M: np.ndarray,
    M_self: np.ndarray,
    theta: float,
    soft_base: float,
    order: Sequence[int] | np.ndarray,
) -> np.ndarray:
    if M.ndim != 2:
        raise ValueError(f"M must be a 2-D (reference × failed) matrix, got shape {M.shape}")
    m, ell = M.shape
    if M_self.shape != (m, m):
        raise ValueError(
            f"M_self must have shape ({m}, {m}) to match M's {m} reference rows, got {M_self.shape}"
        )
    if not (np.all(np.isfinite(M)) and np.all(np.isfinite(M_self))):
        raise ValueError("M and M_self must be finite")
    if not np.isfinite(theta):
        raise ValueError(f"theta must be finite, got {theta}")
    if not 0.0 <= soft_base < 1.0:
        raise ValueError(f"soft_base must lie in [0, 1), got {soft_base}")
    pi = np.asarray(order)
    if (
        pi.shape != (ell,)
        or (ell and not np.issubdtype(pi.dtype, np.integer))
        or not np.array_equal(np.sort(pi), np.arange(ell))
    ):
        raise ValueError(
            f"order must be a permutation of the {ell} failed-step indices 0..{ell - 1}, got {order!r}"
        )
    return pi.astype(np.intp)


def monotonic_match(
    M: np.ndarray,
    M_self: np.ndarray,
    theta: float,
    soft_base: float,
    order: Sequence[int] | np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Monotonic semantic credit with the reference position each failed step claimed.

    Same algorithm as :func:`monotonic_credit`; additionally returns ``position[v]``, the
    reference position credited to failed step v (−1 when v earned nothing), which the
    credit-spectrum plot draws.

    Returns:
        ``(credit, position)``: float64 credits in [0, 1] and intp positions, both length ℓ.
    """
    M = np.asarray(M, dtype=np.float64)
    M_self = np.asarray(M_self, dtype=np.float64)
    pi = _check_matcher_args(M, M_self, theta, soft_base, order)
    return _run_matcher(M, failure_table(M_self, theta) - 1, theta, soft_base, pi)


def _run_matcher(
    M: np.ndarray,
    nxt: np.ndarray,
    theta: float,
    soft_base: float,
    pi: np.ndarray,
    monotonic: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 2 proper, given the backtrack table next(j) = fail[j] − 1 (inputs checked).

    ``monotonic=False`` is the paper's "− monotonicity" ablation [SCPO §4.3.2]: every
    advance of j is credited, so an already-credited reference position can be rewarded
    again (repeated credit).
    """
    m, ell = M.shape
    credit = np.zeros(ell, dtype=np.float64)
    position = np.full(ell, -1, dtype=np.intp)
    if m == 0:
        return credit, position
    rows = M.tolist()  # plain floats: faster scalar access
    back = nxt.tolist()
    j, j_max = -1, -1
    for v in pi.tolist():  # Alg. 2, lines 5–20
        while j >= 0 and rows[j + 1][v] < theta:
            j = back[j]
        if rows[j + 1][v] >= theta:
            j += 1
            if j > j_max or not monotonic:  # new progress: credit and advance frontier
                credit[v] = max(0.0, (rows[j][v] - soft_base) / (1.0 - soft_base))
                position[v] = j
                j_max = max(j_max, j)
        if j == m - 1:
            break
    return credit, position


def monotonic_credit(
    M: np.ndarray,
    M_self: np.ndarray,
    theta: float,
    soft_base: float,
    order: Sequence[int] | np.ndarray,
) -> np.ndarray:
    """SCPO's monotonic credit matcher [SCPO App. B.2, Algorithm 2].

    Args:
        M: Reference × failed similarity, shape (m, ℓ), values in [0, 1].
        M_self: Reference self-similarity M*, shape (m, m).
        theta: Match threshold θ (0.6).
        soft_base: Soft base λ ∈ [0, 1) (0.4).
        order: Processing order π, a permutation of 0..ℓ−1.

    Returns:
        r^SCPO, float64 of length ℓ:  with j = −1, j_max = −1 and, for v in π,
        ``while j ≥ 0 and M[j+1, v] < θ: j = next(j)``; if ``M[j+1, v] ≥ θ``: j += 1 and,
        when j > j_max, r_v = max(0, (M[j, v] − λ)/(1 − λ)), j_max = j; stop once j = m−1.
        ``next`` comes from :func:`failure_table`.  Each reference position is credited at
        most once, for any π.

    Example (reference a, b; failed steps b, a, b; chronological: a is matched at v=1,
    then b at v=2; v=0 found no a yet):
        >>> M = np.array([[0.1, 0.9, 0.1], [0.8, 0.1, 0.7]])
        >>> monotonic_credit(M, np.eye(2), 0.6, 0.4, [0, 1, 2]).round(4).tolist()
        [0.0, 0.8333, 0.5]
    """
    return monotonic_match(M, M_self, theta, soft_base, order)[0]


# --- step texts and orders ---------------------------------------------------------------
def _text(action: str, feedback: str) -> str:
    return f"{action} \u2016 {feedback}"


def step_text(step: Step) -> str:
    """x_t = ``action ‖ feedback``: the action and the observation it produced [SCPO App. A.5]."""
    return _text(step.action, step.feedback)


def _kept(valid: Sequence[Any], feedback: Sequence[str], noop_feedback: frozenset[str]) -> list[int]:
    return [t for t, (v, fb) in enumerate(zip(valid, feedback)) if v and fb.strip().lower() not in noop_feedback]


def kept_steps(traj: Trajectory, noop_feedback: frozenset[str] = NOOP_FEEDBACK) -> list[int]:
    """Indices of the steps SCPO scores: valid actions whose feedback is not a no-op."""
    return _kept([s.valid for s in traj.steps], [s.feedback for s in traj.steps], noop_feedback)


def _row_length(extra: Mapping[str, Any], observation: str, action: str) -> float:
    """A row's length for the batcher: ``extra["num_tokens"]`` when recorded, else characters."""
    n = extra.get("num_tokens") if extra else None
    if n is not None and type(n) is not bool and isinstance(n, (int, float)) and math.isfinite(n):
        return float(n)
    return float(len(observation) + len(action))


def _episode_terms(rows: RowTable, mode: str, over: str) -> list[list[np.ndarray]]:
    """The unshaped A_E per group and trajectory, as :func:`~wrappers.credit.common.task_norm`
    computes it group by group (O_i summed in step order, Z normalised over the group)."""
    rew = rows.reward.tolist()
    off = rows.offsets.tolist()
    o = [sum(rew[a:b]) for a, b in pairwise(off)]
    out = []
    for t0, t1 in pairwise(rows.group_traj.tolist()):
        lengths = [off[i + 1] - off[i] for i in range(t0, t1)]
        o_g = np.array(o[t0:t1], dtype=np.float64)
        if over == "trajectories":
            adv = normalize(o_g, mode, singleton="identity")
            out.append([np.full(n, a) for n, a in zip(lengths, adv)])
        elif off[t1] == off[t0]:
            out.append([np.zeros(0) for _ in lengths])
        else:
            z = np.repeat(o_g, lengths) + rows.penalty[off[t0] : off[t1]]
            normed = normalize(z, mode, singleton="identity")
            out.append(list(np.split(normed, np.cumsum(lengths)[:-1])))
    return out


def length_balanced_order(lengths: Sequence[float] | np.ndarray, partitions: int) -> np.ndarray:
    """The batch order a token-balancing batcher produces.

    Rows are dealt, longest first (ties: lower index first), to the least-loaded of
    ``partitions`` parts that still has room (each part holds ⌈n/k⌉ or ⌊n/k⌋ rows; load
    ties: lower part first); each part keeps its rows in ascending index order and the
    parts are concatenated.

    Returns:
        A permutation of ``range(len(lengths))``: position → row index.

    Example (lengths 5,1,4,2 into 2 parts of 2 rows: 5→A; 4→B; 2→B (load 4 < 5); 1→A (B is
    full); parts A=[0,1], B=[2,3]; the last case deals 5→A, 4→B, 2→B, 1→A giving A=[0,2],
    B=[1,3]):
        >>> length_balanced_order([5, 1, 4, 2], 2).tolist()
        [0, 1, 2, 3]
        >>> length_balanced_order([1, 5, 4, 2], 2).tolist()
        [0, 1, 2, 3]
        >>> length_balanced_order([5, 4, 1, 2], 2).tolist()
        [0, 2, 1, 3]
    """
    if int(partitions) < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    x = np.asarray(lengths, dtype=np.float64)
    n, k = x.size, int(partitions)
    if k == 1 or n <= 1:
        return np.arange(n, dtype=np.intp)
    cap = [n // k + (1 if p < n % k else 0) for p in range(k)]
    count = [0] * k
    heap = [(0.0, p) for p in range(k)]  # (load, part): least loaded, then lowest index
    part = [0] * n
    xs = x.tolist()
    for r in np.lexsort((np.arange(n), -x)).tolist():  # longest first, ties by index
        load, p = heap[0]  # (load, part) pairs are distinct, so the minimum is unique
        part[r] = p
        count[p] += 1
        if count[p] < cap[p]:
            heapq.heapreplace(heap, (load + xs[r], p))
        else:  # a full part leaves the heap
            heapq.heappop(heap)
    return np.lexsort((np.arange(n), np.array(part, dtype=np.intp))).astype(np.intp)


def _check_scores(M: np.ndarray, g: int) -> None:
    if not np.all(np.isfinite(M)):
        raise ValueError(f"group {g}: the SCPO scorer returned non-finite similarities")


def _stable_seed(value: Hashable) -> int:
    return zlib.crc32(repr(value).encode("utf-8"))


#: A group's plan: (reference, its kept steps, [(failed sibling, its kept steps)]).
_Plan = tuple[int, list[int], list[tuple[int, list[int]]]]


# --- traces (for plots and inspection) -----------------------------------------------------
@dataclass
class MatchTrace:
    """Everything SCPO computed for one failed sibling (for plots and debugging).

    Attributes:
        reference: Index (in the group) of the success reference τ*.
        failed: Index of the failed sibling.
        ref_steps: Step indices of τ* that were kept (length m).
        failed_steps: Step indices of the failed sibling that were kept (length ℓ).
        M: Reference × failed similarity (m × ℓ).
        M_self: Reference self-similarity (m × m).
        order: The processing order π (indices into ``failed_steps``).
        credit: r^SCPO per kept failed step.
        position: Credited reference position per kept failed step (−1: none).
    """

    reference: int
    failed: int
    ref_steps: list[int]
    failed_steps: list[int]
    M: np.ndarray
    M_self: np.ndarray
    order: np.ndarray
    credit: np.ndarray
    position: np.ndarray


@register_estimator("scpo")
class SCPO(Estimator):
    """Semantic Consistency Policy Optimisation: GiGPO with monotonic semantic step credit.

    Args:
        theta: Match threshold θ (0.6).
        soft_base: Soft base λ (0.4).
        alpha: Weight α of the auxiliary reward (0.5 ALFWorld; 1.0 WebShop).
        success_threshold: τ_succ on the outcome O_i = Σ reward (0; 9.0 for WebShop).
        order: ``"length"`` (default), ``"chronological"`` or ``"random"``.
        scorer: A :class:`~wrappers.credit.scorers.PairScorer` or a spec for
            :func:`~wrappers.credit.scorers.make_scorer` (``"auto"``: packaged MiniLM
            bi-encoder, else lexical; ``"lexical"``; ``"bi-encoder[:path]"``;
            ``"cross-encoder:path"``).  Built lazily on the first call.
        partitions: Parts of the length-balancing batcher (``order="length"``): the
            data-parallel world size it balances over (2).
        seed: Seed of ``order="random"``.
        gamma: GiGPO's discount γ (0.95).
        norm: ``"mean_std"`` or ``"mean"``.
        step_weight: ω, weight of the (shaped) step term (1).
        episode_weight: Weight of the (unshaped) episode term (1).
        episode_norm: ``"rows"`` or ``"trajectories"`` (GiGPO's episode normalisation).
        monotonic: Credit only advances of the frontier j_max (default, Algorithm 2);
            ``False`` is the "− monotonicity" ablation (repeated credit) [SCPO §4.3.2].
        reference: ``"longest"`` successful sibling (default, §3.2) or ``"shortest"``
            (the "shortest reference" ablation, §4.3.3); ties go to the first.

    Example (lexical scorer; the failed sibling repeats the winner's first step and earns
    credit (1 − 0.4)/(1 − 0.4) = 1 for it):
        >>> from rubrics.trajectory import Step, Trajectory
        >>> win = Trajectory("t", 0, [Step("s0", "go to desk 1", feedback="You see a key."),
        ...                           Step("s1", "take key 1", reward=10.0, feedback="You take it.")])
        >>> loss = Trajectory("t", 1, [Step("s0", "go to desk 1", feedback="You see a key."),
        ...                            Step("s1", "look", feedback="Nothing happens.")])
        >>> est = SCPO(scorer="lexical", order="chronological")
        >>> [(tr.failed, tr.failed_steps, tr.credit.tolist()) for tr in est.traces([[win, loss]])[0]]
        [(1, [0], [1.0])]
        >>> est([[win, loss]])[0].shaped_rewards[1].round(3).tolist()   # R̃ = R + 0.5·r
        [0.5, 0.0]
    """

    def __init__(
        self,
        *,
        theta: float = 0.6,
        soft_base: float = 0.4,
        alpha: float = 0.5,
        success_threshold: float = 0.0,
        order: str = "length",
        scorer: str | PairScorer = "auto",
        partitions: int = 2,
        seed: int = 0,
        gamma: float = 0.95,
        norm: str = "mean_std",
        step_weight: float = 1.0,
        episode_weight: float = 1.0,
        episode_norm: str = "rows",
        monotonic: bool = True,
        reference: str = "longest",
    ) -> None:
        check_choice("order", order, ORDERS)
        check_choice("reference", reference, ("longest", "shortest"))
        if not isinstance(monotonic, bool):
            raise TypeError(f"monotonic must be a bool, got {type(monotonic).__name__}")
        check_choice("norm", norm, NORMS)
        check_choice("episode_norm", episode_norm, ("rows", "trajectories"))
        if not np.isfinite(theta):
            raise ValueError(f"theta must be finite, got {theta}")
        if not 0.0 <= soft_base < 1.0:
            raise ValueError(f"soft_base must lie in [0, 1), got {soft_base}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must lie in [0, 1]; got {gamma}")
        if int(partitions) < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        if not isinstance(scorer, PairScorer):
            check_scorer_spec(scorer)
        self.theta = float(theta)
        self.soft_base = float(soft_base)
        self.alpha = float(alpha)
        self.success_threshold = float(success_threshold)
        self.order = order
        self.scorer = scorer
        self.partitions = int(partitions)
        self.seed = int(seed)
        self.gamma = float(gamma)
        self.norm = norm
        self.step_weight = float(step_weight)
        self.episode_weight = float(episode_weight)
        self.episode_norm = episode_norm
        self.monotonic = monotonic
        self.reference = reference
        self._scorer: PairScorer | None = scorer if isinstance(scorer, PairScorer) else None

    @property
    def pair_scorer(self) -> PairScorer:
        """The scorer object (built from the spec on first use)."""
        if self._scorer is None:
            self._scorer = make_scorer(self.scorer)
        return self._scorer

    # -- orders -----------------------------------------------------------------------------
    def _batch_positions(self, cols: StepRows) -> np.ndarray:
        """Each row's position in the length-balanced batch."""
        lengths: list[float] = []
        for g in range(len(cols.sizes)):
            step = cols.group_columns(g, ("extra", "observation", "action"))[0]
            lengths += [_row_length(ex, ob, a) if ex else float(len(ob) + len(a))
                        for ex, ob, a in zip(step["extra"], step["observation"], step["action"])]
        perm = length_balanced_order(lengths, self.partitions)
        pos = np.empty(len(lengths), dtype=np.intp)
        pos[perm] = np.arange(len(lengths))
        return pos

    def _order(self, ell: int, task_id: Hashable, slot: int, positions: np.ndarray | None) -> np.ndarray:
        """π over the ℓ kept steps of a failed sibling (``positions``: their batch positions)."""
        if self.order == "chronological":
            return np.arange(ell, dtype=np.intp)
        if self.order == "random":
            rng = np.random.default_rng([self.seed & 0xFFFFFFFF, _stable_seed(task_id), int(slot) & 0xFFFFFFFF])
            return rng.permutation(ell).astype(np.intp)
        assert positions is not None
        return np.argsort(positions, kind="stable").astype(np.intp)

    # -- main -------------------------------------------------------------------------------
    def traces(self, groups: Sequence[Sequence[Trajectory]]) -> list[list[MatchTrace]]:
        """The matcher traces of every failed sibling, per group (what :meth:`compute` uses).

        Groups without a success reference (or without a failed sibling) get ``[]``.
        """
        return self._traces(RowTable.from_columns(StepRows.of_groups(groups)))[0]

    def _plans(self, rows: RowTable) -> tuple[list[_Plan | None], list[tuple[list[str], list[str]]]]:
        """Per group its :data:`_Plan` (None without a success or without a failure), and the
        scorer requests: (reference texts, texts) for M* and for each failed sibling."""
        rew = rows.reward.tolist()
        plans: list[_Plan | None] = []
        requests: list[tuple[list[str], list[str]]] = []
        for g, (t0, t1) in enumerate(pairwise(rows.group_traj.tolist())):
            off = (rows.offsets[t0 : t1 + 1] - rows.offsets[t0]).tolist()  # the group's rows from 0
            first = int(rows.offsets[t0])
            o = [sum(rew[first + a : first + b]) for a, b in pairwise(off)]  # O_i, as outcomes() sums it
            plans.append(self._group_plan(rows.columns, g, o, off, requests))
        return plans, requests

    def _group_plan(self, cols: StepRows, g: int, o: list[float], off: list[int],
                    requests: list[tuple[list[str], list[str]]]) -> _Plan | None:
        """Group g's plan, its scorer requests appended to ``requests`` (``o``: outcomes,
        ``off``: the row offsets of its trajectories)."""
        succ = [i for i in range(len(o)) if o[i] > self.success_threshold]
        failed = [i for i in range(len(o)) if o[i] <= self.success_threshold]
        if not succ or not failed:
            return None
        sign = 1 if self.reference == "longest" else -1
        ref = max(succ, key=lambda i: (sign * (off[i + 1] - off[i]), -i))  # ties → first
        step = cols.group_columns(g, ("valid", "feedback", "action"))[0]
        valid, feedback, action = step["valid"], step["feedback"], step["action"]
        kept = {i: _kept(valid[off[i] : off[i + 1]], feedback[off[i] : off[i + 1]], NOOP_FEEDBACK)
                for i in (ref, *failed)}
        texts = {i: [_text(action[off[i] + t], feedback[off[i] + t]) for t in ts] for i, ts in kept.items()}
        requests.append((texts[ref], texts[ref]))
        requests.extend((texts[ref], texts[w]) for w in failed)
        return ref, kept[ref], [(w, kept[w]) for w in failed]

    def _traces(self, rows: RowTable) -> tuple[list[list[MatchTrace]], float]:
        cols = rows.columns
        if not isinstance(cols, StepRows):
            raise TypeError("SCPO reads step texts: build the table from StepRows "
                            "(RowTable.from_columns(StepRows.of_groups(groups)) or flat rows)")
        plans, requests = self._plans(rows)
        mats: list[np.ndarray] = []
        seconds = 0.0
        if any(p is not None for p in plans):
            t0 = time.perf_counter()
            mats = self.pair_scorer.score_matrices(requests)  # one scorer call per batch
            seconds = time.perf_counter() - t0
        batch_pos = self._batch_positions(cols) if self.order == "length" else None
        tasks, slots = cols.traj_column("task_id"), cols.traj_column("slot")
        off = rows.offsets.tolist()
        out: list[list[MatchTrace]] = []
        k = 0
        for g, (first, plan) in enumerate(zip(rows.group_traj.tolist(), plans)):
            if plan is None:
                out.append([])
                continue
            ref, ref_steps, items = plan
            M_self = mats[k]
            k += 1
            _check_scores(M_self, g)
            nxt = failure_table(M_self, self.theta) - 1  # once per reference
            traces = []
            for w, ws in items:
                M = mats[k]
                k += 1
                _check_scores(M, g)
                i = first + w
                positions = batch_pos[off[i] + np.asarray(ws, dtype=np.intp)] if batch_pos is not None else None
                pi = self._order(len(ws), tasks[i], slots[i], positions)
                credit, position = _run_matcher(M, nxt, self.theta, self.soft_base, pi, self.monotonic)
                traces.append(MatchTrace(ref, w, ref_steps, ws, M, M_self, pi, credit, position))
            out.append(traces)
        return out, seconds

    def compute(self, groups: Sequence[Sequence[Trajectory]]) -> list[CreditResult]:
        """Credit for validated groups: :meth:`compute_rows` on their rows."""
        return self.compute_rows(RowTable.from_columns(StepRows.of_groups(groups)))

    def compute_rows(self, rows: RowTable) -> list[CreditResult]:
        """Credit for a :class:`~wrappers.credit.graph.RowTable` of
        :class:`~wrappers.credit.flat.StepRows`: the matcher per failed sibling, then GiGPO's
        step term over the whole batch at once (anchor groups never span groups)."""
        all_traces, scorer_seconds = self._traces(rows)
        credit = np.zeros(rows.n_rows)
        offsets = rows.offsets
        for first, traces in zip(rows.group_traj.tolist(), all_traces):
            for tr in traces:
                credit[offsets[first + tr.failed] + np.asarray(tr.failed_steps, dtype=np.intp)] = tr.credit
        shaped_rows = rows.returns(self.gamma) + self.alpha * credit  # Eq. 4: R̃ = R + α·r
        a_s, all_stats = gigpo_step_rows(rows, self.gamma, self.norm, shaped_rows)
        lengths = np.diff(offsets).tolist()
        results = []
        for first, traces, shaped_g, a_s_g, a_e, stats in zip(
            rows.group_traj.tolist(), all_traces, rows.split_groups(shaped_rows), rows.split_groups(a_s),
            _episode_terms(rows, self.norm, self.episode_norm), all_stats,  # (A_E unshaped)
        ):
            adv = [self.episode_weight * e + self.step_weight * s for e, s in zip(a_e, a_s_g)]
            failed = len(traces)
            n_rows = sum(lengths[first + tr.failed] for tr in traces)
            credited = int(sum(int(np.count_nonzero(tr.position >= 0)) for tr in traces))
            aux = float(self.alpha * sum(float(tr.credit.sum()) for tr in traces))
            stats.update(
                has_reference=int(bool(traces)),
                failed_trajectories=failed,
                credited_steps=credited,
                credited_steps_per_failed=credited / failed if failed else 0.0,
                aux_reward_sum=aux,
                mean_aux_reward=aux / n_rows if n_rows else 0.0,
                filtered_steps=int(sum(lengths[first + tr.failed] - len(tr.failed_steps) for tr in traces)),
                batch_scorer_seconds=scorer_seconds,
            )
            results.append(CreditResult(adv, shaped_rewards=shaped_g, stats=stats))
        return results


def scpo_traces(groups: Sequence[Sequence[Trajectory]], **params: Any) -> list[list[MatchTrace]]:
    """Convenience: the matcher traces :class:`SCPO` (built with ``params``) computes."""
    return SCPO(**params).traces(groups)
