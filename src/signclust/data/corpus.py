"""The one corpus format every stage reads and writes.

A corpus lives in one folder:

- ``tokens.csv``  one row per token, in reading order:
  ``token_id, text_id, line, position, image_index, label, hand``
  (``label`` and ``hand`` may be empty; ``position`` counts within the text).
- ``images.npy``  uint8 array (m, H, W): ink is bright (255) on a dark (0)
  background; identical images are stored once, tokens point at them by
  ``image_index``.
- ``meta.json``   source, licence, attribution, counts (texts, tokens, types,
  images) and whatever the producer wants to record.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from signclust.errors import UserError
from signclust.io import atomic_dir, atomic_write_text

TOKEN_COLUMNS = ["token_id", "text_id", "line", "position", "image_index", "label", "hand"]
CORPUS_FILES = ("tokens.csv", "images.npy", "meta.json")
MAX_POSITION = 2 ** 31 - 1


@dataclass
class Corpus:
    tokens: pd.DataFrame
    images: np.ndarray
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        self._check_columns()
        # meta.json always carries the counts of the tokens it describes
        self.meta.update(self.counts())

    # -- construction -----------------------------------------------------
    @classmethod
    def from_arrays(cls, images: np.ndarray, labels=None, text_ids=None, hands=None,
                    meta: dict | None = None, dedupe: bool = True) -> "Corpus":
        """One token per image row, in the given order. Texts default to one per token."""
        n = len(images)
        text_ids = np.arange(n) if text_ids is None else np.asarray(text_ids)
        position = pd.Series(text_ids).groupby(text_ids).cumcount().to_numpy()
        if dedupe:
            uniq, image_index = dedupe_images(images)
        else:
            uniq, image_index = np.ascontiguousarray(images, dtype=np.uint8), np.arange(n)
        tokens = pd.DataFrame({
            "token_id": np.arange(n),
            "text_id": [str(t) for t in text_ids],
            "line": 0,
            "position": position,
            "image_index": image_index,
            "label": [str(x) for x in labels] if labels is not None else "",
            "hand": [str(x) for x in hands] if hands is not None else "",
        })
        return cls(tokens=tokens, images=uniq, meta=dict(meta or {}))

    # -- views ------------------------------------------------------------
    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def image_size(self) -> tuple[int, int]:
        return tuple(self.images.shape[1:])

    @property
    def has_labels(self) -> bool:
        return bool((self.tokens["label"].astype(str) != "").all()) and self.n_tokens > 0

    def token_images(self) -> np.ndarray:
        """(n, H, W) uint8, one image per token (a gather; copies)."""
        return self.images[self.tokens["image_index"].to_numpy()]

    def image_index(self) -> np.ndarray:
        return self.tokens["image_index"].to_numpy(dtype=np.int64)

    def labels(self) -> np.ndarray:
        """Gold labels as integer codes (n,), or raise if the corpus has none."""
        if not self.has_labels:
            raise UserError("this corpus has no gold labels for every token")
        return pd.factorize(self.tokens["label"].astype(str), sort=True)[0]

    def texts(self) -> list[np.ndarray]:
        """Token ids of each text, in reading order (line breaks kept inside a text)."""
        order = self.tokens.sort_values(["text_id", "position"], kind="stable")
        return [g["token_id"].to_numpy() for _, g in order.groupby("text_id", sort=False)]

    def counts(self) -> dict:
        labels = self.tokens["label"].astype(str)
        return {
            "texts": int(self.tokens["text_id"].nunique()),
            "tokens": int(self.n_tokens),
            "types": int(labels[labels != ""].nunique()),
            "images": int(len(self.images)),
        }

    def subset(self, token_ids: np.ndarray) -> "Corpus":
        """The given tokens (re-numbered 0..k-1), with only the images they use."""
        tok = self.tokens.iloc[np.asarray(token_ids)].copy()
        used, new_index = np.unique(tok["image_index"].to_numpy(), return_inverse=True)
        tok["image_index"] = new_index
        tok["token_id"] = np.arange(len(tok))
        return Corpus(tok.reset_index(drop=True), self.images[used], dict(self.meta))

    # -- validation and storage -------------------------------------------
    def validate(self) -> None:
        self._check_columns()   # again: tokens may have been edited since construction
        t = self.tokens
        if self.images.dtype != np.uint8 or self.images.ndim != 3:
            raise UserError(f"images must be uint8 (m, H, W); got {self.images.dtype} {self.images.shape}")
        if len(t) == 0:
            raise UserError("corpus has no tokens")
        if not np.array_equal(t["token_id"].to_numpy(), np.arange(len(t))):
            raise UserError("token_id must run 0..n-1 in row order")
        pos = pd.to_numeric(t["position"], errors="coerce")
        if pos.isna().any() or (pos % 1 != 0).any() or pos.min() < 0 or pos.max() > MAX_POSITION:
            raise UserError(f"position must be a whole number from 0 to {MAX_POSITION} in every row")
        idx = t["image_index"].to_numpy()
        if idx.min() < 0 or idx.max() >= len(self.images):
            raise UserError(f"image_index out of range 0..{len(self.images) - 1}")
        dup = t.duplicated(["text_id", "position"])
        if dup.any():
            row = t[dup].iloc[0]
            raise UserError(f"duplicate (text_id, position) = ({row.text_id}, {row.position})")

    def _check_columns(self) -> None:
        missing = [c for c in TOKEN_COLUMNS if c not in self.tokens.columns]
        if missing:
            raise UserError(f"tokens table lacks column(s): {', '.join(missing)}")

    def save(self, folder: str | Path) -> None:
        """Write atomically: the folder appears complete or not at all."""
        self.validate()
        meta = dict(self.meta)
        meta.update(self.counts())
        meta["image_size"] = list(self.image_size)
        with atomic_dir(folder) as tmp:
            self.tokens[TOKEN_COLUMNS].to_csv(tmp / "tokens.csv", index=False)
            np.save(tmp / "images.npy", self.images)
            atomic_write_text(tmp / "meta.json", json.dumps(meta, indent=2, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, folder: str | Path, mmap: bool = False) -> "Corpus":
        folder = Path(folder)
        if not folder.is_dir():
            raise UserError(missing_corpus_message(folder))
        for name in ("tokens.csv", "images.npy", "meta.json"):
            if not (folder / name).exists():
                raise UserError(f"{folder} is not a corpus folder: {name} is missing")
        tokens = pd.read_csv(folder / "tokens.csv", dtype={"text_id": str, "label": str, "hand": str},
                             keep_default_na=False)
        images = np.load(folder / "images.npy", mmap_mode="r" if mmap else None)
        meta = json.loads((folder / "meta.json").read_text())
        corpus = cls(tokens, images, meta)
        corpus.validate()
        return corpus


def is_corpus_folder(folder: str | Path) -> bool:
    """A folder holding exactly a corpus's three files (what ``Corpus.save`` writes)."""
    folder = Path(folder)
    return folder.is_dir() and not folder.is_symlink() and sorted(os.listdir(folder)) == sorted(CORPUS_FILES)


def check_corpus_out(out: str | Path, force: bool, protect: dict[str, Path] | None = None) -> Path:
    """Where a corpus may be written, or one UserError saying why not; returns the absolute path.

    Refused always: OUT equal to, inside or containing a protected path (``protect``: what -> path,
    e.g. the image folder and the manifest of an import), OUT equal to or containing the current
    folder, an OUT that exists and is not a folder, a non-empty folder that is not a corpus, and a
    parent folder that cannot be written. An existing corpus is replaced only with ``force``.
    """
    raw = Path(out)
    if str(out) in ("", ".", "..") or raw.name in ("", ".", ".."):
        raise UserError(f"output folder '{out}' must name a new folder (e.g. data/corpora/mine)")
    out = raw.expanduser().absolute()
    real = out.resolve()
    cwd = Path.cwd().resolve()
    if real == cwd or real in cwd.parents:
        raise UserError(f"output folder {out} is the current folder or contains it; choose a new folder")
    for what, path in (protect or {}).items():
        path = Path(path).resolve()
        if real == path:
            raise UserError(f"output folder {out} is the {what}; choose another folder")
        if real in path.parents:
            raise UserError(f"output folder {out} contains the {what} ({path}); choose another folder")
        if path in real.parents:
            raise UserError(f"output folder {out} is inside the {what} ({path}); choose another folder")
    if os.path.lexists(out):
        if out.is_symlink() or not out.is_dir():
            raise UserError(f"output path {out} exists and is not a folder; remove it or choose another")
        if os.listdir(out):
            if not is_corpus_folder(out):
                raise UserError(f"output folder {out} is not empty and not a signclust corpus; "
                                "choose a new or empty folder")
            if not force:
                raise UserError(f"output folder {out} already holds a corpus; pass --force to replace it")
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"cannot write the output folder {out}: {parent} is not writable")
    return out


def missing_corpus_message(folder: Path) -> str:
    """'no corpus X' naming the corpora that do exist beside it (a misspelt name shows its fix)."""
    import difflib
    parent = folder.parent
    have = sorted(p.name for p in parent.iterdir() if (p / "tokens.csv").is_file()) if parent.is_dir() else []
    close = difflib.get_close_matches(folder.name, have, n=1)
    return (f"no corpus '{folder.name}' ({folder} does not exist)"
            + (f"; did you mean '{close[0]}'?" if close else ".")
            + (f" Corpora in {parent}: {', '.join(have)}." if have else
               " Build one with `signclust prepare <name>` or `signclust import`."))


def dedupe_images(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unique images in first-seen order, and each input's index into them."""
    images = np.ascontiguousarray(images, dtype=np.uint8)
    flat = images.reshape(len(images), -1)
    keys = flat.view(np.dtype((np.void, flat.shape[1])))[:, 0]
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first)                 # unique ids in first-seen order
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return images[np.sort(first)], rank[inverse.ravel()]
