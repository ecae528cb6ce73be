"""Bring your own corpus: a manifest CSV plus an image folder -> the corpus format.

    python -m signclust.data.import_corpus manifest.csv images/ data/corpora/mine

Manifest columns: ``text_id, position, image`` (a path relative to the image
folder), optional ``label``, ``hand`` and ``line``. Images of any size and mode
are converted to grayscale (a transparent background is composited so that the
ink stays visible, whatever its colour), polarity-normalised to bright ink on a
dark background, scaled with aspect kept and centred on a square canvas.

Refused with one error naming the manifest row: a missing, unreadable or too large
image (``--max-pixels``, checked from the header before decoding), a blank or
near-blank image (``--allow-blank`` imports it with a warning), a path escaping the
image folder, a duplicate ``(text_id, position)``, a position that is not a whole
number from 0 to 2**31 - 1. OUT must be a new or empty folder, or an existing corpus
with ``--force`` (replaced atomically); it may never be, contain or lie inside the
image folder or the manifest.

When ``--force`` replaces the project's ``data/corpora/<name>`` with other tokens or images,
what the later stages made from the old corpus (its distances, every run's fits and checkpoints,
its metrics, timings, inventory and ablation reports: ``derived_outputs``) is removed, and the
importer names it: a run trained on the old corpus would otherwise be read as a result on the new
one. Re-importing the same tokens and images removes nothing.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image, UnidentifiedImageError

from signclust.config import REPO_ROOT, load_params
from signclust.data.corpus import MAX_POSITION, Corpus, check_corpus_out, dedupe_images, is_corpus_folder
from signclust.errors import UserError, cli_main

REQUIRED = ("text_id", "position", "image")
MAX_PIXELS = 4096 * 4096          # default --max-pixels: far above any sign crop, far below a bomb
BLANK_CONTRAST = 0.05             # ink must differ from the background by 5% of the full range ...
MIN_INK_PIXELS = 4                # ... over at least this many source pixels ...
MIN_INK_FRACTION = 1e-4           # ... and this share of the image


def _has_alpha(img: Image.Image) -> bool:
    return img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (img.mode == "P" and "transparency" in img.info) \
        or (img.mode in ("RGB", "L") and "transparency" in img.info)


def _composite(img: Image.Image) -> Image.Image:
    """Flatten transparency on a background the ink contrasts with: white under dark ink (the
    usual case), black under light ink (white ink on a transparent background would otherwise
    vanish into a white one)."""
    rgba = img.convert("RGBA")
    a = np.asarray(rgba, dtype=np.float32)
    alpha = a[..., 3] / 255.0
    weight = float(alpha.sum())
    lum = (a[..., :3] @ np.array([0.299, 0.587, 0.114], dtype=np.float32)) / 255.0
    light_ink = weight > 0 and float((lum * alpha).sum()) / weight > 0.5
    background = (0, 0, 0, 255) if light_ink else (255, 255, 255, 255)
    return Image.alpha_composite(Image.new("RGBA", rgba.size, background), rgba)


def normalise_image(img: Image.Image, size: int, margin: float = 0.08) -> np.ndarray:
    """Grayscale, ink bright on dark, cropped to the ink, aspect kept, centred at size x size."""
    return normalise_and_check(img, size, margin)[0]


def tight_crop(gray: np.ndarray, border: np.ndarray, flip: bool) -> bool:
    """A crop cut tight to the ink (a segmenter's bounding box) of a sign whose strokes run along
    its box (E, M, Г, 一): ink covers most of the border, so the border's majority tone is the
    ink's, while most of the image is background. Said of a border that is mixed (10-90% of it
    bright) whose majority tone (``flip``: bright) is the minority tone of the whole image; a
    border of one tone is a margin, and decides."""
    bright_border = float((border > 0.5).mean())
    return 0.1 < bright_border < 0.9 and bool((gray > 0.5).mean() > 0.5) != flip


def normalise_and_check(img: Image.Image, size: int, margin: float = 0.08) -> tuple[np.ndarray, str | None]:
    """(the normalised glyph, None) or (it, why the image is blank or near-blank)."""
    if _has_alpha(img):
        img = _composite(img)
    if img.mode in ("I", "F") or img.mode.startswith("I;16"):
        # convert("L") clips 16-bit and float images at 255: stretch their own range instead
        x = np.asarray(img, dtype=np.float32)
        lo, hi = float(x.min()), float(x.max())
        gray = (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)
    else:
        gray = np.asarray(img.convert("L"), dtype=np.float32) / 255.0
    # the background is the majority tone along the border: make it dark
    border = np.concatenate([gray[0], gray[-1], gray[:, 0], gray[:, -1]])
    # (cut tight to the ink, the border is mostly ink: then the whole image's majority tone)
    flip = bool(np.median(border) > 0.5)
    tight = tight_crop(gray, border, flip)
    if flip != tight:                                   # a bright background
        gray, border = 1.0 - gray, 1.0 - border
    gray = np.clip(gray - np.median(gray if tight else border), 0, None)
    peak = gray.max()
    problem = None
    if peak < BLANK_CONTRAST:
        problem = "blank (no ink differs from the background)"
    if peak > 0:
        gray = gray / peak
    ink = int((gray > 0.1).sum())
    if problem is None and ink < max(MIN_INK_PIXELS, MIN_INK_FRACTION * gray.size):
        problem = f"near-blank (only {ink} ink pixel{'s' if ink != 1 else ''} of {gray.size})"
    ys, xs = np.nonzero(gray > 0.1)
    if len(ys):
        gray = gray[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
    h, w = gray.shape
    inner = max(1, int(round(size * (1 - 2 * margin))))
    scale = inner / max(h, w)
    nh, nw = max(1, int(round(h * scale))), max(1, int(round(w * scale)))
    small = Image.fromarray((gray * 255).astype(np.uint8)).resize((nw, nh), Image.LANCZOS)
    canvas = np.zeros((size, size), dtype=np.uint8)
    top, left = (size - nh) // 2, (size - nw) // 2
    canvas[top:top + nh, left:left + nw] = np.asarray(small)
    return canvas, problem


@contextlib.contextmanager
def _header_only_limits():
    """Let PIL open any header: the pixel limit is ours (checked before decoding), not PIL's
    bomb check, which raises at 2x its limit and only warns between 1x and 2x."""
    before = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = None
    try:
        yield
    finally:
        Image.MAX_IMAGE_PIXELS = before


def read_manifest(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise UserError(f"manifest not found: {path}")
    if not path.is_file():
        raise UserError(f"manifest {path} is not a file (a CSV with columns {', '.join(REQUIRED)})")
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise UserError(f"manifest {path} is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as err:
        raise UserError(f"manifest {path} is not a readable CSV: {err}") from None
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise UserError(f"manifest {path} lacks column(s) {', '.join(missing)} "
                        f"(needs {', '.join(REQUIRED)}; optional label, hand, line)")
    if len(df) == 0:
        raise UserError(f"manifest {path} has no rows")
    return df


def import_corpus(manifest: Path, image_dir: Path, size: int = 48, name: str | None = None,
                  max_pixels: int = MAX_PIXELS, allow_blank: bool = False) -> Corpus:
    df = read_manifest(manifest)
    image_dir = image_dir.resolve()
    if not image_dir.is_dir():
        raise UserError(f"image folder not found: {image_dir}")
    # manifest row numbers as a person sees them in an editor: header is line 1
    row_no = lambda i: i + 2  # noqa: E731
    positions = pd.to_numeric(df["position"], errors="coerce")
    bad = positions.isna() | (positions % 1 != 0) | (positions < 0) | (positions > MAX_POSITION)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise UserError(f"manifest row {row_no(i)}: position '{df['position'].iloc[i]}' is not a whole number "
                        f"from 0 to {MAX_POSITION}")
    df["position"] = positions.astype(np.int64)
    dup = df.duplicated(["text_id", "position"])
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        raise UserError(f"manifest row {row_no(i)}: duplicate (text_id, position) = "
                        f"({df['text_id'].iloc[i]}, {df['position'].iloc[i]})")
    images, blank = [], []
    for i, rel in enumerate(df["image"]):
        if not rel:
            raise UserError(f"manifest row {row_no(i)}: empty image path")
        path = (image_dir / rel).resolve()
        if not path.is_relative_to(image_dir):
            raise UserError(f"manifest row {row_no(i)}: image path '{rel}' escapes the image folder")
        if not path.is_file():
            raise UserError(f"manifest row {row_no(i)}: image '{rel}' not found in {image_dir}")
        try:
            with _header_only_limits(), Image.open(path) as img:
                w, h = img.size
                if w * h > max_pixels:
                    raise UserError(f"manifest row {row_no(i)}: image '{rel}' is {w} x {h} = {w * h} pixels, "
                                    f"more than the limit of {max_pixels} (--max-pixels); not decoded")
                img.load()
                glyph, problem = normalise_and_check(img, size)
        except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as err:
            raise UserError(f"manifest row {row_no(i)}: image '{rel}' is unreadable ({err.__class__.__name__})") from None
        images.append(glyph)
        if problem:
            blank.append(f"manifest row {row_no(i)}: image '{rel}' is {problem}")
    if blank and not allow_blank:
        more = f" (and {len(blank) - 1} more)" if len(blank) > 1 else ""
        raise UserError(f"{blank[0]}{more}; pass --allow-blank to import such images anyway")
    for line in blank:
        print(f"warning: {line}; imported as it is (--allow-blank)", file=sys.stderr)
    uniq, image_index = dedupe_images(np.stack(images))
    df = df.assign(_order=np.arange(len(df))).sort_values(["text_id", "position", "_order"], kind="stable")
    tokens = pd.DataFrame({
        "token_id": np.arange(len(df)),
        "text_id": df["text_id"].to_numpy(),
        "line": pd.to_numeric(df["line"], errors="coerce").fillna(0).astype(int).to_numpy() if "line" in df else 0,
        "position": df["position"].to_numpy(),
        "image_index": image_index[df["_order"].to_numpy()],
        "label": df["label"].to_numpy() if "label" in df else "",
        "hand": df["hand"].to_numpy() if "hand" in df else "",
    })
    meta = {"name": name or manifest.stem, "source": f"imported from {manifest.name}",
            "licence": "as provided by the user", "attribution": "user corpus",
            "import": {"manifest": str(manifest), "image_dir": str(image_dir), "image_size": size}}
    return Corpus(tokens, uniq, meta)


def content_digest(folder: Path) -> str | None:
    """sha256 of a corpus folder's tokens and images (not its meta.json, which names the manifest);
    None when the folder holds no corpus."""
    if not is_corpus_folder(folder):
        return None
    h = hashlib.sha256()
    for name in ("tokens.csv", "images.npy"):
        with open(folder / name, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def derived_outputs(root: Path, name: str) -> list[Path]:
    """What the later stages made from the corpus ``data/corpora/<name>`` of the project at ``root``
    and that exists: its distances, each run's fits and checkpoints, and the reports named after a run
    and the corpus (metrics, timings, inventory) or after the corpus alone (ablation). The run names
    are the run folders' and those of params.yaml's ``runs``."""
    runs_root = root / "models" / "runs"
    ckpt_root = runs_root / ".checkpoints"
    runs = {p.name for p in runs_root.iterdir() if p.is_dir() and not p.name.startswith(".")} \
        if runs_root.is_dir() else set()
    with contextlib.suppress(UserError):             # no or a bad params.yaml: the run folders still name runs
        runs |= set((load_params().get("runs") or {}))
    found = [root / "data" / "distances" / name]
    found += [runs_root / run / name for run in sorted(runs)]
    found += [ckpt_root / run / name for run in sorted(os.listdir(ckpt_root))] if ckpt_root.is_dir() else []
    reports = root / "reports"
    for run in sorted(runs):
        found += [reports / "metrics" / f"{run}_{name}.json", reports / "timings" / f"{run}_{name}.json",
                  reports / "inventory" / f"{run}_{name}.html", reports / "inventory" / f"{run}_{name}.png"]
    found += [reports / f"ablation_{name}.md", reports / "metrics" / f"ablation_{name}.json"]
    return [p for p in found if os.path.lexists(p)]


def remove(paths: list[Path]) -> None:
    for p in paths:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifest", type=Path)
    ap.add_argument("image_dir", type=Path)
    ap.add_argument("out", type=Path, help="corpus folder to write (e.g. data/corpora/mine)")
    ap.add_argument("--size", type=int, default=48, help="output image size in pixels (default 48)")
    ap.add_argument("--name", help="corpus name recorded in meta.json (default: OUT's folder name)")
    ap.add_argument("--force", action="store_true", help="replace OUT when it already holds a corpus")
    ap.add_argument("--allow-blank", action="store_true",
                    help="import blank or near-blank images with a warning instead of stopping")
    ap.add_argument("--max-pixels", type=int, default=MAX_PIXELS,
                    help=f"refuse images with more pixels than this, before decoding (default {MAX_PIXELS})")
    args = ap.parse_args(argv)
    if not 8 <= args.size <= 256:
        raise UserError("--size must be between 8 and 256")
    if args.max_pixels < 1:
        raise UserError("--max-pixels must be at least 1")
    out = check_corpus_out(args.out, args.force, {"image folder": args.image_dir, "manifest": args.manifest})
    corpus = import_corpus(args.manifest, args.image_dir, args.size, args.name or out.name, args.max_pixels,
                           args.allow_blank)
    before = content_digest(out)
    corpus.save(out)
    c = corpus.counts()
    print(f"imported {c['tokens']} tokens in {c['texts']} texts ({c['images']} distinct images, "
          f"{c['types']} labelled types) -> {args.out}")
    unlabelled = int((corpus.tokens["label"].astype(str) == "").sum())
    if 0 < unlabelled < c["tokens"]:
        print(f"note: {unlabelled} of {c['tokens']} tokens have no label; the stages read a corpus as labelled only "
              "when every token is (evaluate refuses it; the inventory counts the labelled tokens alone)")
    root = REPO_ROOT.resolve()
    if before is not None and before != content_digest(out) and out.resolve() == root / "data" / "corpora" / out.name:
        stale = derived_outputs(root, out.name)
        remove(stale)
        if stale:
            print(f"removed what the later stages made from the corpus it replaced: "
                  f"{', '.join(str(p.relative_to(root)) for p in stale)}")


if __name__ == "__main__":
    main()
