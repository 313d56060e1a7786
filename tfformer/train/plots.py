"""Figures for notebooks and run directories: attention heatmaps, the learning-rate schedule of
§5.3 and a run's training history. Needs matplotlib (`pip install tfformer[plot]`).

Figures are made with `matplotlib.figure.Figure`, not pyplot: no GUI backend and no global
figure list, so a training process can draw one and let it go. In a notebook, show one with
`display(fig)` or as a cell's last expression; write one with `fig.savefig(path)`.
"""

from __future__ import annotations

import csv
import importlib.util
import math
import os
from typing import TYPE_CHECKING, Sequence

import numpy as np

from tfformer.config import PAPER_WARMUP_STEPS
from tfformer.utils.files import atomic_write
from tfformer.utils.run_dir import RunDir

if TYPE_CHECKING:  # TensorFlow's: not needed to draw a run's history
    from tfformer.decode.attention_maps import AttentionMaps

_MISSING = "tfformer.train.plots needs matplotlib: pip install 'tfformer[plot]'"
KIND_TITLES = {"encoder_self": "encoder self-attention",
               "decoder_self": "decoder self-attention",
               "decoder_cross": "encoder-decoder attention"}


def available() -> bool:
    """Whether matplotlib is installed (the `plot` extra)."""
    return importlib.util.find_spec("matplotlib") is not None


def _figure(width: float, height: float):
    if not available():
        raise ImportError(_MISSING)
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _heatmap(ax, weights: np.ndarray, rows: Sequence[str], columns: Sequence[str],
             row_labels: bool = True, column_labels: bool = True):
    image = ax.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto",
                      interpolation="nearest")
    ax.set_xticks(range(len(columns)), columns if column_labels else [], rotation=90,
                  fontsize=8)
    ax.set_yticks(range(len(rows)), rows if row_labels else [], fontsize=8)
    return image


def plot_attention(maps: AttentionMaps, kind: str = "decoder_cross", layer: int = -1,
                   head: int = 0):
    """One head's attention weights as a heatmap, queries down and keys across, each axis
    labelled with the subword pieces.

    Args:
        maps: from `tfformer.decode.attention_maps.attention_maps`.
        kind: "encoder_self", "decoder_self" or "decoder_cross".
        layer: which layer (negative counts from the last).
        head: which head.

    Returns:
        a matplotlib Figure with one Axes.
    """
    rows, columns = maps.labels(kind)  # raises ValueError for an unknown kind
    weights = maps.weights[kind]
    layers, heads = weights.shape[:2]
    if not -layers <= layer < layers or not -heads <= head < heads:
        raise ValueError(f"{kind} has {layers} layers x {heads} heads; got layer {layer}, "
                         f"head {head}")
    fig = _figure(max(4.0, 0.3 * len(columns) + 1.5), max(3.5, 0.3 * len(rows) + 1.5))
    ax = fig.add_subplot()
    image = _heatmap(ax, weights[layer, head], rows, columns)
    ax.set_title(f"{KIND_TITLES[kind]}, layer {layer % layers + 1}, head {head % heads + 1}")
    ax.set_xlabel("keys")
    ax.set_ylabel("queries")
    fig.colorbar(image, ax=ax, shrink=0.8)
    return fig


def plot_attention_grid(maps: AttentionMaps, kind: str = "decoder_cross"):
    """Every layer (rows) and head (columns) of one kind of attention, pieces on the outer axes.

    Returns:
        a matplotlib Figure with layers x heads Axes.
    """
    rows, columns = maps.labels(kind)  # raises ValueError for an unknown kind
    weights = maps.weights[kind]
    layers, heads = weights.shape[:2]
    cell_width = max(1.8, 0.18 * len(columns))
    cell_height = max(1.6, 0.18 * len(rows))
    fig = _figure(cell_width * heads + 1.5, cell_height * layers + 1.5)
    axes = fig.subplots(layers, heads, squeeze=False)
    for i in range(layers):
        for j in range(heads):
            ax = axes[i][j]
            image = _heatmap(ax, weights[i, j], rows, columns, row_labels=j == 0,
                             column_labels=i == layers - 1)
            if i == 0:
                ax.set_title(f"head {j + 1}", fontsize=9)
            if j == 0:
                ax.set_ylabel(f"layer {i + 1}", fontsize=9)
    fig.suptitle(f"{KIND_TITLES[kind]}: \"{maps.source}\" -> \"{maps.translation}\"",
                 fontsize=10)
    fig.colorbar(image, ax=axes, shrink=0.6)
    return fig


def plot_schedule(d_model: int, warmup_steps: int = PAPER_WARMUP_STEPS, steps: int = 100_000,
                  scale: float = 1.0):
    """The learning rate of §5.3 (eq. 3) over `steps` updates, with the peak at the warmup.

    Returns:
        a matplotlib Figure.
    """
    from tfformer.model.schedule import NoamSchedule

    schedule = NoamSchedule(d_model, warmup_steps, scale)
    # The schedule takes Keras' 0-based counter: counter u - 1 applies update u.
    updates = np.unique(np.linspace(1, steps, num=min(steps, 2000)).astype(np.int64))
    rates = schedule(updates - 1).numpy()
    fig = _figure(6.0, 3.5)
    ax = fig.add_subplot()
    ax.plot(updates, rates)
    peak = scale * d_model ** -0.5 * warmup_steps ** -0.5
    if warmup_steps <= steps:
        ax.axvline(warmup_steps, color="gray", linestyle=":")
        ax.annotate(f"warmup {warmup_steps}: {peak:.2e}", (warmup_steps, peak),
                    textcoords="offset points", xytext=(8, -4), fontsize=8)
    ax.set_xlabel("update (step_num)")
    ax.set_ylabel("learning rate")
    ax.set_title(f"d_model^-0.5 * min(step^-0.5, step * {warmup_steps}^-1.5), "
                 f"d_model = {d_model}", fontsize=9)
    return fig


def read_history(path: str | os.PathLike) -> dict[str, list[float]]:
    """The columns of a run's metrics.csv (or of the run dir holding it), as floats; an empty
    cell (a metric some epochs lack) is NaN."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = RunDir(path).metrics
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path} has no epochs yet")
    return {name: [float(row[name]) if row.get(name) not in (None, "") else math.nan
                   for row in rows] for name in rows[0]}


def plot_history(run: str | os.PathLike):
    """Loss, accuracy and dev BLEU per epoch of a run (its metrics.csv), against updates.

    Args:
        run: a run directory, or its metrics.csv.

    Returns:
        a matplotlib Figure with one Axes per metric the run has (2 or 3).
    """
    history = read_history(run)
    panels = [("loss", ["loss", "val_loss"]), ("accuracy", ["accuracy", "val_accuracy"]),
              ("dev BLEU", ["dev_bleu"])]
    panels = [(title, [c for c in columns if c in history]) for title, columns in panels]
    panels = [(title, columns) for title, columns in panels if columns]
    fig = _figure(4.0 * len(panels), 3.2)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    steps = history["step"]
    for ax, (title, columns) in zip(axes, panels):
        for column in columns:
            ax.plot(steps, history[column], marker="o", markersize=3,
                    label=column.replace("val_", "validation ").replace("_", " "))
        ax.set_title(title)
        ax.set_xlabel("update")
        ax.legend(fontsize=8)
    return fig


def save_history_plot(run_dir: str | os.PathLike) -> str:
    """Writes `plot_history` of the run to RUN/history.png (atomically); returns its path."""
    run = RunDir(run_dir)
    fig = plot_history(run.path)
    atomic_write(run.history_plot, lambda path: fig.savefig(path, dpi=100, format="png"))
    return run.history_plot
