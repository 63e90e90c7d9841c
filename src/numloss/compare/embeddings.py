"""The digit-embedding analysis: how the ten digit tokens sit in a model's input embedding.

For the rows of the digits 0..9 of the input embedding: the cosine-similarity matrix (does the
model place 3 nearer 4 than 9?) and a 2-D PCA projection (is there a number line?), before and
after training. With a pretrained model trained through LoRA adapters on the linear layers only,
the embedding does not change: "before" and "after" are then the same, and the plots say so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from numloss.digits import DigitVocab


def digit_embeddings(model: Any, tokenizer: Any) -> list[list[float]]:
    """The ten digit rows [10, H] of the model's input embedding, as nested float lists."""
    vocab = DigitVocab.from_tokenizer(tokenizer)
    weight = model.get_input_embeddings().weight.detach().float().cpu()
    return weight[vocab.digit_ids_tensor()].tolist()


def cosine_matrix(rows: list[list[float]] | torch.Tensor) -> torch.Tensor:
    """[10, 10] cosine similarities between the rows."""
    x = torch.as_tensor(rows, dtype=torch.float64)
    x = x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return x @ x.T


def pca_2d(rows: list[list[float]] | torch.Tensor) -> tuple[torch.Tensor, list[float]]:
    """The rows projected on their two first principal components [10, 2], and the share of
    variance each explains."""
    x = torch.as_tensor(rows, dtype=torch.float64)
    x = x - x.mean(dim=0, keepdim=True)
    _, s, vh = torch.linalg.svd(x, full_matrices=False)
    variance = s**2
    share = (variance / variance.sum().clamp_min(1e-300)).tolist()
    return x @ vh[:2].T, share[:2]


def neighbour_order_score(rows: list[list[float]] | torch.Tensor) -> float:
    """Mean cosine similarity of adjacent digits (k, k+1) minus that of all other pairs: > 0 when
    the embedding reflects digit order."""
    c = cosine_matrix(rows)
    digits = torch.arange(10)
    others = (digits[:, None] - digits[None, :]).abs() > 1  # neither the digit nor a neighbour
    return float(c.diagonal(1).mean() - c[others].mean())


def plot_embeddings(panels: dict[str, dict[str, Any]], out: Path) -> list[Path]:
    """Cosine matrices and PCA projections of `panels` ({objective: {before, after}}), as PNGs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n, p in panels.items() if p.get("after")]
    if not names:
        return []
    first = panels[names[0]]
    columns = [("initial", first["before"])] if first.get("before") else []
    columns += [(n, panels[n]["after"]) for n in names]
    wide = min(5, len(columns))  # rows of at most 5 panels: 13 in one row were too small to read
    tall = -(-len(columns) // wide)

    def grid() -> tuple[Any, list[Any]]:
        fig, axes = plt.subplots(tall, wide, figsize=(2.6 * wide, 2.8 * tall), squeeze=False)
        for ax in axes.flat[len(columns) :]:
            ax.axis("off")
        return fig, list(axes.flat[: len(columns)])

    def save(fig: Any, name: str) -> Path:
        fig.savefig(out / name, dpi=110, bbox_inches="tight")
        plt.close(fig)
        return out / name

    fig, axes = grid()
    for ax, (title, rows) in zip(axes, columns, strict=True):
        image = ax.imshow(cosine_matrix(rows).numpy(), vmin=-1, vmax=1, cmap="RdBu_r")
        ax.set_title(f"{title}\norder {neighbour_order_score(rows):+.2f}", fontsize=8)
        ax.set_xticks(range(10))
        ax.set_yticks(range(10))
        ax.tick_params(labelsize=6)
    fig.colorbar(image, ax=axes, shrink=0.8)
    fig.suptitle(
        "cosine similarity of the digit embeddings 0-9 (order: adjacent minus other pairs)",
        fontsize=9,
        y=1.0 + 0.06 / tall,
    )
    paths = [save(fig, "embeddings_cosine.png")]

    fig, axes = grid()
    for ax, (title, rows) in zip(axes, columns, strict=True):
        points, share = pca_2d(rows)
        ax.plot(points[:, 0], points[:, 1], "-", color="0.8", lw=0.8)
        ax.scatter(points[:, 0], points[:, 1], c=range(10), cmap="viridis", s=20)
        for k in range(10):
            ax.annotate(str(k), (float(points[k, 0]), float(points[k, 1])), fontsize=8)
        ax.set_title(f"{title}\nPC1 {100 * share[0]:.0f}%, PC2 {100 * share[1]:.0f}%", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(
        "PCA of the digit embeddings (line joins 0-1-...-9)", fontsize=9, y=1.0 + 0.06 / tall
    )
    return [*paths, save(fig, "embeddings_pca.png")]
