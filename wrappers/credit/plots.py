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

from agent_envs.trajectory import Trajectory
from wrappers.credit.graph import SUCCESS, Terminal, TransitionGraph, graph_stats

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes

    from wrappers.credit.milegpo import MileCredit

__all__ = ["plot_graph"]


def _new_axes(ax: Axes | None, figsize: tuple[float, float]) -> Axes:
    if ax is not None:
        return ax
    from matplotlib.figure import Figure  # noqa: PLC0415  (lazy: keep `import wrappers` light)

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
        >>> from agent_envs.trajectory import Step, Trajectory
        >>> win = Trajectory("t", 0, [Step("s0", "a"), Step("s1", "b", reward=10.0)], success=True)
        >>> loss = Trajectory("t", 1, [Step("s0", "c"), Step("s2", "d")])
        >>> ax = plot_graph([win, loss])
        >>> ax.get_title().splitlines()[0]
        'GraphGPO graph: 3 states, 4 edges, reuse 0.50, reachable 0.67, ties 0.00'
    """
    import matplotlib as mpl  # noqa: PLC0415

    g = TransitionGraph(group) if credit is None else credit.graph
    ax = _new_axes(ax, (8.0, 5.0))
    stats = graph_stats(g, unreachable)
    d = g.filled_distances("max_plus_one")
    # node colour: success rate of the trajectories that pass through the state
    nn = max(g.n_nodes, 1)
    tv = np.unique(np.concatenate([g.traj * nn + g.src, g.traj * nn + g.dst]))
    visitors = np.bincount(tv % nn, minlength=g.n_nodes)
    winners = np.bincount(tv % nn, weights=g.success[tv // nn].astype(float), minlength=g.n_nodes)
    rate = winners / np.maximum(visitors, 1)
    # columns: x = −D (success at 0, far states to the left); rows: order of first appearance
    x = -d
    y = np.zeros(g.n_nodes)
    for col in np.unique(x):
        members = np.flatnonzero(x == col)
        y[members] = np.arange(members.size) - (members.size - 1) / 2
    # edges: distinct (u, v) with traversal counts and whether a winner used them
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
    norm = mpl.colors.Normalize(vmin=0.0, vmax=1.0)
    sc = ax.scatter(x, y, c=rate, cmap="RdYlGn", norm=norm, s=260, zorder=3, edgecolors="black")
    if g.success_node >= 0:
        ax.scatter([x[g.success_node]], [y[g.success_node]], marker="*", s=520, c="gold",
                   edgecolors="black", zorder=4)
    if credit is not None:
        index = g.index
        for keys, color in ((credit.milestones, "goldenrod"), (credit.traps, "purple")):
            for k, score in keys.items():
                v = index[k]
                ax.scatter([x[v]], [y[v]], s=520, facecolors="none", edgecolors=color,
                           linewidths=1.0 + 3.0 * score, zorder=5)
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


# ==== 2. SCPO ================================================================================
# (credit-spectrum plots go here)


# ==== 3. MCGPO ===============================================================================
# (preference-statistics plots go here)
