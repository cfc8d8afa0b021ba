"""Plotting helpers for credit diagnostics (matplotlib, imported lazily inside each function).

Sections:

1. Graph credit — :func:`plot_graph`: the GraphGPO transition graph of one group, states laid
   out by their distance to success, optionally with MileGPO's milestones and traps.
2. SCPO — credit spectrum (reference × failed heatmap with the credited cells).
3. MCGPO — preference statistics.

Every function draws on a given ``matplotlib.axes.Axes`` or, when none is given, on a new
``matplotlib.figure.Figure`` (no pyplot, so no GUI backend is needed) and returns the Axes;
save it with ``ax.figure.savefig(path)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rubrics.trajectory import Trajectory
from wrappers.credit.graph import SUCCESS, Terminal, TransitionGraph, graph_stats

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes

    from wrappers.credit.milegpo import MileCredit

__all__ = ["plot_graph"]


def _new_axes(ax: Axes | None, figsize: tuple[float, float]) -> Axes:
    if ax is not None:
        return ax
    from matplotlib.figure import Figure  # lazy: keep `import wrappers` light

    return Figure(figsize=figsize, layout="constrained").add_subplot()


def _label(key: Any, width: int) -> str:
    if key is SUCCESS:
        return "SUCCESS"
    if isinstance(key, Terminal):
        return f"end τ{key.trajectory}"
    text = str(key).replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


# ==== 1. Graph credit (GraphGPO, MileGPO) ===================================================

def plot_graph(
    group: Sequence[Trajectory],
    *,
    gamma: float = 0.1,
    unreachable: str = "max_plus_one",
    credit: MileCredit | None = None,
    ax: Axes | None = None,
    label_width: int = 16,
    show_labels: bool = True,
) -> Axes:
    """Draw the GraphGPO transition graph of one group.

    States are placed in columns by their distance D to the virtual success node (success on
    the right; states that cannot reach it in the leftmost column, D = max + 1), so a
    destination's graph return is 10·γ^D of its column.  Node colour is the success rate of
    the trajectories passing through the state; edges traversed by a
    successful trajectory are green, the others grey, with width growing with the number of
    traversals.  Given a MileGPO ``credit`` (from
    :func:`~wrappers.credit.milegpo.milegpo_credit`), milestones are ringed in gold and traps
    in purple, ring width by normalised score.  The title carries the SPEC §4.3 diagnostics.

    Args:
        group: The sibling trajectories of one task.
        gamma: γ of the graph return (named in the axis label).
        unreachable: ``"max_plus_one"`` or ``"zero"`` (for the tie statistic).
        credit: Optional MileGPO credit of the same group.
        ax: Axes to draw on (a new Figure's Axes when None).
        label_width: Characters of each state label.
        show_labels: Whether to write state labels.

    Returns:
        The Axes.

    Example:
        >>> from rubrics.trajectory import Step, Trajectory
        >>> win = Trajectory("t", 0, [Step("s0", "a"), Step("s1", "b", reward=10.0)], success=True)
        >>> loss = Trajectory("t", 1, [Step("s0", "c"), Step("s2", "d")])
        >>> ax = plot_graph([win, loss])
        >>> ax.get_title().splitlines()[0]
        'GraphGPO graph: 3 states, 4 edges, reuse 0.50, reachable 0.67, ties 0.00'
    """
    import matplotlib as mpl

    g = TransitionGraph(group)
    ax = _new_axes(ax, (8.0, 5.0))
    stats = graph_stats(g, unreachable)
    d = g.filled_distances("max_plus_one")
    x, y = _graph_layout(g, d)
    _draw_edges(ax, g, x, y)
    norm = mpl.colors.Normalize(vmin=0.0, vmax=1.0)
    sc = ax.scatter(x, y, c=_success_rates(g), cmap="RdYlGn", norm=norm, s=260, zorder=3, edgecolors="black")
    if g.success_node >= 0:
        ax.scatter([x[g.success_node]], [y[g.success_node]], marker="*", s=520, c="gold",
                   edgecolors="black", zorder=4)
    if credit is not None:
        _ring_milestones_and_traps(ax, g, x, y, credit)
    if show_labels:
        for v, k in enumerate(g.keys):
            ax.annotate(_label(k, label_width), (x[v], y[v]), xytext=(0, 13), textcoords="offset points",
                        ha="center", fontsize=7)
    ax.figure.colorbar(sc, ax=ax, label="success rate of the trajectories through the state")
    finite = np.isfinite(g.success_distances())
    ticks = np.unique(-d)
    ax.set_xticks(ticks, [f"{-t:g}" if finite[np.flatnonzero(x == t)[0]] else f"{-t:g}\n(unreach.)" for t in ticks])
    ax.set_yticks([])
    ax.set_xlabel(f"distance to success D(s)  (graph return 10·{gamma:g}^D)")
    ax.set_title(
        f"GraphGPO graph: {stats['nodes']} states, {stats['edges']} edges, reuse {stats['reuse_rate']:.2f}, "
        f"reachable {stats['success_reachable_share']:.2f}, ties {stats['tie_rate']:.2f}\n"
        f"{int(g.success.sum())}/{len(group)} successful (green edges)"
        + ("" if credit is None else f"; {len(credit.milestones)} milestones, {len(credit.traps)} traps"),
        fontsize=9,
    )
    ax.margins(0.15)
    return ax


def _success_rates(g: TransitionGraph) -> np.ndarray:
    """Per state: the success rate of the trajectories that pass through it (node colour)."""
    nn = max(g.n_nodes, 1)
    tv = np.unique(np.concatenate([g.traj * nn + g.src, g.traj * nn + g.dst]))
    visitors = np.bincount(tv % nn, minlength=g.n_nodes)
    winners = np.bincount(tv % nn, weights=g.success[tv // nn].astype(float), minlength=g.n_nodes)
    return winners / np.maximum(visitors, 1)


def _graph_layout(g: TransitionGraph, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Columns x = −D (success at 0, far states to the left); rows: order of first appearance."""
    x = -d
    y = np.zeros(g.n_nodes)
    for col in np.unique(x):
        members = np.flatnonzero(x == col)
        y[members] = np.arange(members.size) - (members.size - 1) / 2
    return x, y


def _draw_edges(ax: Axes, g: TransitionGraph, x: np.ndarray, y: np.ndarray) -> None:
    """Distinct (u, v) edges: green when a winner used them, width by traversal count."""
    nn = max(g.n_nodes, 1)
    key = g.src * nn + g.dst
    uniq, inv = np.unique(key, return_inverse=True) if key.size else (np.zeros(0, np.intp), np.zeros(0, np.intp))
    counts = np.bincount(inv, minlength=uniq.size) if key.size else np.zeros(0)
    won = np.zeros(uniq.size, dtype=bool)
    if key.size:
        np.logical_or.at(won, inv, g.success[g.traj])
    for e, k in enumerate(uniq.tolist()):
        u, v = divmod(k, nn)
        color = "tab:green" if won[e] else "0.6"
        width = 0.8 + 1.2 * np.log2(counts[e])
        if u == v:
            ax.annotate("", xy=(x[u] + 0.12, y[u] + 0.12), xytext=(x[u] - 0.12, y[u] + 0.12),
                        arrowprops={"arrowstyle": "->", "color": color, "lw": width,
                                    "connectionstyle": "arc3,rad=-1.8"})
        else:
            ax.annotate("", xy=(x[v], y[v]), xytext=(x[u], y[u]),
                        arrowprops={"arrowstyle": "->", "color": color, "lw": width, "shrinkA": 9,
                                    "shrinkB": 9, "connectionstyle": "arc3,rad=0.12"})


def _ring_milestones_and_traps(ax: Axes, g: TransitionGraph, x: np.ndarray, y: np.ndarray,
                               credit: MileCredit) -> None:
    """Milestones ringed in gold, traps in purple, ring width by normalised score."""
    index = g.index
    for keys, color in ((credit.milestones, "goldenrod"), (credit.traps, "purple")):
        for k, score in keys.items():
            if k not in index:
                raise ValueError(f"credit names state {k!r}, which is not in this group's graph")
            v = index[k]
            ax.scatter([x[v]], [y[v]], s=520, facecolors="none", edgecolors=color,
                       linewidths=1.0 + 3.0 * score, zorder=5)


# ==== 2. SCPO ================================================================================
# Credit spectrum [SCPO App. C.1, Fig. 4].  (Sections 2 and 3 are maintained with
# wrappers/credit/scpo.py and wrappers/credit/mcgpo.py.)

from collections.abc import Mapping

if TYPE_CHECKING:  # pragma: no cover
    from wrappers.credit.base import CreditResult
    from wrappers.credit.scpo import MatchTrace

__all__ += ["plot_credit_spectrum"]


def plot_credit_spectrum(
    trace: MatchTrace,
    *,
    theta: float | None = None,
    ax: Axes | None = None,
    show_order: bool = False,
    colorbar: bool = True,
) -> Axes:
    """Draw SCPO's credit spectrum of one failed sibling against its success reference.

    The heatmap is the similarity M (reference steps down, failed steps across, both in
    trajectory order and labelled with their step indices); credited cells
    (``trace.position``) are boxed in red and joined by a red line in failed-step order;
    with ``theta`` the cells at or above the threshold are dotted.  With ``show_order``
    every credited cell is labelled with the rank at which the matcher processed it (the
    default, reordered matcher may credit a later step first).

    Args:
        trace: A :class:`~wrappers.credit.scpo.MatchTrace` from
            :meth:`~wrappers.credit.scpo.SCPO.traces`.
        theta: Match threshold to mark (optional).
        ax: Axes to draw on (a new Figure's Axes when None).
        show_order: Label credited cells with their processing rank.
        colorbar: Add a colour bar.

    Returns:
        The Axes.

    Example:
        >>> from wrappers.credit.scpo import SCPO
        >>> from rubrics.trajectory import Step, Trajectory
        >>> win = Trajectory("t", 0, [Step("s0", "go to desk 1", feedback="ok"),
        ...                           Step("s1", "take key 1", reward=10.0, feedback="ok")])
        >>> loss = Trajectory("t", 1, [Step("s0", "go to desk 1", feedback="ok"), Step("s2", "look", feedback="ok")])
        >>> (trace,) = SCPO(scorer="lexical").traces([[win, loss]])[0]
        >>> plot_credit_spectrum(trace, theta=0.6).get_title().splitlines()[0]
        'SCPO credit spectrum: failed τ1 vs reference τ0'
    """
    M = np.asarray(trace.M, dtype=np.float64)
    m, ell = M.shape
    ax = _new_axes(ax, (max(4.0, 0.35 * ell + 2.5), max(3.0, 0.35 * m + 1.5)))
    im = ax.imshow(M if M.size else np.zeros((max(m, 1), max(ell, 1))), cmap="viridis", vmin=0.0, vmax=1.0,
                   aspect="auto", interpolation="nearest", origin="upper")
    if theta is not None and M.size:
        uu, vv = np.nonzero(M >= theta)
        ax.scatter(vv, uu, s=6, c="white", marker=".", zorder=2, label=f"M ≥ θ = {theta:g}")
    from matplotlib.patches import Rectangle

    cols = np.flatnonzero(trace.position >= 0)
    rank = np.empty(ell, dtype=np.intp)
    rank[np.asarray(trace.order, dtype=np.intp)] = np.arange(ell)
    for v in cols:
        u = int(trace.position[v])
        ax.add_patch(Rectangle((v - 0.5, u - 0.5), 1.0, 1.0, fill=False, edgecolor="red", linewidth=2.0,
                               zorder=3))
        if show_order:
            ax.annotate(str(int(rank[v]) + 1), (v, u), ha="center", va="center", color="white",
                        fontsize=7, zorder=4)
    if cols.size:
        ax.plot(cols, trace.position[cols], color="red", linewidth=1.2, zorder=3)
    ax.set_xticks(range(ell), [str(t) for t in trace.failed_steps], fontsize=7)
    ax.set_yticks(range(m), [str(t) for t in trace.ref_steps], fontsize=7)
    ax.set_xlabel(f"failed τ{trace.failed}: kept step")
    ax.set_ylabel(f"reference τ{trace.reference}: kept step")
    if colorbar:
        ax.figure.colorbar(im, ax=ax, label="similarity M")
    ax.set_title(
        f"SCPO credit spectrum: failed τ{trace.failed} vs reference τ{trace.reference}\n"
        f"{cols.size}/{m} reference positions credited, Σ r = {float(trace.credit.sum()):.2f}",
        fontsize=9,
    )
    return ax


# ==== 3. MCGPO ===============================================================================
# Preference statistics [MCGPO §4.4, Fig. 4; App. C.5, D.3].

__all__ += ["plot_preference_stats"]


def plot_preference_stats(
    updates: Sequence[Mapping[str, float] | Sequence[CreditResult]],
    *,
    axes: Sequence[Axes] | None = None,
    window: int = 1,
) -> list[Axes]:
    """Draw MCGPO's preference-construction diagnostics over training updates.

    Four panels, one point per window of ``window`` updates (counts summed, ratios pooled
    over the window's pairs as in the paper): (a) accepted pairs per update split into
    exact and coarse matches; (b) agreement (W + T/2)/(W + T + L) of the preference
    directions with the candidates' own outcomes, and the tie share; (c) mean |û| and mean
    evidence weight c over accepted pairs; (d) the share of pairs with each balanced support
    n*.

    Args:
        updates: Per update either a :func:`~wrappers.credit.mcgpo.summarize_pairs` dict or
            the list of MCGPO :class:`~wrappers.credit.base.CreditResult` of that update.
        axes: Four Axes to draw on (a new 2 × 2 Figure when None).
        window: Updates per plotted point.

    Returns:
        The four Axes.

    Example:
        >>> axes = plot_preference_stats([{"pairs": 3, "pairs_exact": 1, "wins": 2, "ties": 1, "losses": 0,
        ...     "mean_contrast": 0.8, "mean_weight": 0.3, "n_star_1": 2, "n_star_2": 1}])
        >>> axes[0].get_title()
        '(a) accepted pairs per update'
    """
    from wrappers.credit.mcgpo import summarize_pairs

    if int(window) < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    summ = [u if isinstance(u, Mapping) else summarize_pairs(u) for u in updates]
    if axes is None:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(10.0, 7.0), layout="constrained")
        axes = list(fig.subplots(2, 2).ravel())
    elif len(axes) != 4:
        raise ValueError(f"plot_preference_stats needs 4 axes, got {len(axes)}")
    supports = sorted({int(k[len("n_star_"):]) for s in summ for k in s if k.startswith("n_star_")})
    xs, exact, coarse, agree, tie, contrast, weight = [], [], [], [], [], [], []
    star = {n: [] for n in supports}
    for w0 in range(0, len(summ), int(window)):
        chunk = summ[w0:w0 + int(window)]
        n_up = len(chunk)
        pairs = sum(float(s.get("pairs", 0)) for s in chunk)
        ex = sum(float(s.get("pairs_exact", 0)) for s in chunk)
        w, t, lo = (sum(float(s.get(k, 0)) for s in chunk) for k in ("wins", "ties", "losses"))
        xs.append(w0 + n_up / 2 + 0.5)
        exact.append(ex / n_up)
        coarse.append((pairs - ex) / n_up)
        agree.append((w + t / 2) / (w + t + lo) if w + t + lo else np.nan)
        tie.append(t / (w + t + lo) if w + t + lo else np.nan)
        # pair-weighted means over the window
        contrast.append(sum(float(s.get("mean_contrast", 0)) * float(s.get("pairs", 0)) for s in chunk) / pairs
                        if pairs else np.nan)
        weight.append(sum(float(s.get("mean_weight", 0)) * float(s.get("pairs", 0)) for s in chunk) / pairs
                      if pairs else np.nan)
        for n in supports:
            star[n].append(sum(float(s.get(f"n_star_{n}", 0)) for s in chunk) / pairs if pairs else np.nan)
    width = 0.8 * int(window)
    a, b, c, d = axes
    a.bar(xs, exact, width, label="exact", color="tab:blue")
    a.bar(xs, coarse, width, bottom=exact, label="coarse", color="tab:orange")
    a.set_title("(a) accepted pairs per update")
    a.set_ylabel("pairs / update")
    a.legend(fontsize=8)
    b.plot(xs, agree, marker="o", label="agreement (W + T/2)/(W+T+L)")
    b.plot(xs, tie, marker="s", linestyle="--", label="tie share")
    b.axhline(0.5, color="0.6", linewidth=0.8)
    b.set_ylim(0.0, 1.0)
    b.set_title("(b) agreement with candidate outcomes")
    b.legend(fontsize=8)
    c.plot(xs, contrast, marker="o", label="mean |û|")
    c.plot(xs, weight, marker="s", label="mean weight c")
    c.set_title("(c) outcome contrast and evidence weight")
    c.legend(fontsize=8)
    bottom = np.zeros(len(xs))
    for n in supports:
        vals = np.nan_to_num(np.asarray(star[n], dtype=np.float64))
        d.bar(xs, vals, width, bottom=bottom, label=f"n* = {n}")
        bottom += vals
    d.set_ylim(0.0, 1.05)
    d.set_title("(d) balanced support n* (share of pairs)")
    if supports:
        d.legend(fontsize=8)
    for ax in axes:
        ax.set_xlabel("update")
    return list(axes)
