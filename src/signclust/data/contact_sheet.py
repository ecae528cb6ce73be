"""A contact sheet: a few sign types (rows) x several of their token images, to see the data."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from signclust.data.corpus import Corpus  # noqa: E402
from signclust.io import atomic_path  # noqa: E402


def contact_sheet(corpus: Corpus, path: str | Path, n_types: int = 12, per_type: int = 12,
                  title: str = "", seed: int = 0, names: dict | None = None,
                  references: dict | None = None) -> None:
    """Most frequent types first; tokens drawn from as many different hands as possible.

    ``names`` (label -> short row text) replaces the label in the row caption; ``references``
    (label -> uint8 image) adds a reference glyph, drawn in blue, before each row's tokens.
    """
    tok = corpus.tokens
    labels = tok["label"].astype(str)
    if (labels == "").all():
        groups = {"(unlabelled)": tok.index.to_numpy()}
    else:
        top = labels.value_counts().index[:n_types]
        groups = {lab: tok.index[labels == lab].to_numpy() for lab in top}
    rng = np.random.default_rng(seed)
    ref = 1 if references else 0
    fig, axes = plt.subplots(len(groups), per_type + 1 + ref,
                             figsize=((per_type + 1 + ref) * 0.8, len(groups) * 0.85), squeeze=False)
    for row, (label, idx) in enumerate(groups.items()):
        # one token per hand first, so the row shows the variation between scribes
        by_hand = tok.loc[idx].groupby("hand", sort=False).head(1).index.to_numpy()
        pick = list(rng.permutation(by_hand)[:per_type])
        rest = np.setdiff1d(idx, pick)
        pick += list(rng.permutation(rest)[:per_type - len(pick)])
        caption = (names or {}).get(label, label[:14])
        axes[row, 0].text(0.95, 0.5, f"{caption}\n(n={len(idx)})", ha="right", va="center", fontsize=7)
        for col in range(per_type + 1 + ref):
            axes[row, col].axis("off")
        if ref and label in references:
            axes[row, 1].imshow(255 - references[label], cmap="Blues_r", vmin=0, vmax=255)
        for col, token in enumerate(pick, start=1 + ref):
            img = corpus.images[tok.at[token, "image_index"]]
            axes[row, col].imshow(255 - img, cmap="gray", vmin=0, vmax=255)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
