"""Real script fonts (Debian packages) and glyph rasterisation from their outlines.

We rasterise from the outlines with fontTools rather than through PIL's text
drawing because the allograph variants of fonts-ancient-scripts (glyph names
``A301.1``, ``A301.2`` …) sit in no character map: only their glyph names reach them.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from fontTools.pens.basePen import BasePen
from fontTools.ttLib import TTFont
from PIL import Image, ImageChops, ImageDraw

from signclust.errors import UserError

FONT_DIRS = [Path("/usr/share/fonts/truetype/noto"), Path("/usr/share/fonts/truetype/ancient-scripts"),
             Path("/usr/share/fonts/opentype/unifont"), Path("/usr/share/fonts/truetype/unifont")]

# font file -> (Debian package, licence); the package is what `make setup` installs.
FONT_FILES = {
    "NotoSansLinearA-Regular.ttf": ("fonts-noto-core", "OFL-1.1"),
    "NotoSansCypriot-Regular.ttf": ("fonts-noto-core", "OFL-1.1"),
    "NotoSansCuneiform-Regular.ttf": ("fonts-noto-core", "OFL-1.1"),
    "Aegean_hint.ttf": ("fonts-ancient-scripts", "free use (George Douros), see the package copyright"),
    "Akkadian_hint.ttf": ("fonts-ancient-scripts", "free use (George Douros), see the package copyright"),
    "unifont_upper.otf": ("fonts-unifont", "GPL-2+ with font exception / OFL-1.1"),
}

SCRIPT_FONTS = {
    "lineara": ["NotoSansLinearA-Regular.ttf", "Aegean_hint.ttf", "unifont_upper.otf"],
    "cypriot": ["NotoSansCypriot-Regular.ttf", "Aegean_hint.ttf", "unifont_upper.otf"],
    "akkadian": ["NotoSansCuneiform-Regular.ttf", "Akkadian_hint.ttf"],
}


def find_font(filename: str) -> Path:
    for folder in FONT_DIRS:
        if (folder / filename).exists():
            return folder / filename
    package = FONT_FILES.get(filename, ("?", ""))[0]
    raise UserError(f"font {filename} not found; install it with: apt-get install -y {package}")


@dataclass(frozen=True)
class GlyphRef:
    font: str          # font file name
    glyph: str         # glyph name inside the font


@functools.lru_cache(maxsize=None)
def _font(filename: str) -> TTFont:
    return TTFont(str(find_font(filename)), lazy=True)


@functools.lru_cache(maxsize=None)
def _glyph_names(filename: str) -> frozenset:
    return frozenset(_font(filename).getGlyphOrder())


def variants(filename: str, codepoint: int) -> list[GlyphRef]:
    """The glyphs a font offers for a character: the mapped one, then its allographs (``name.N``)."""
    cmap = _font(filename).getBestCmap()
    if codepoint not in cmap:
        return []
    base = cmap[codepoint]
    alts = sorted(n for n in _glyph_names(filename) if n.startswith(base + ".") and n[len(base) + 1:].isdigit())
    return [GlyphRef(filename, base)] + [GlyphRef(filename, a) for a in alts]


class _PolylinePen(BasePen):
    """Flattens outlines into closed polylines (curves sampled at fixed steps)."""

    def __init__(self, glyphset, steps: int = 8):
        super().__init__(glyphset)
        self.contours: list[list[tuple[float, float]]] = []
        self.steps = steps

    def _moveTo(self, pt):
        self.contours.append([pt])

    def _lineTo(self, pt):
        self.contours[-1].append(pt)

    def _curveToOne(self, p1, p2, p3):
        p0 = self.contours[-1][-1]
        for t in np.linspace(0, 1, self.steps + 1)[1:]:
            u = 1 - t
            self.contours[-1].append((u**3 * p0[0] + 3 * u * u * t * p1[0] + 3 * u * t * t * p2[0] + t**3 * p3[0],
                                      u**3 * p0[1] + 3 * u * u * t * p1[1] + 3 * u * t * t * p2[1] + t**3 * p3[1]))

    def _qCurveToOne(self, p1, p2):
        p0 = self.contours[-1][-1]
        for t in np.linspace(0, 1, self.steps + 1)[1:]:
            u = 1 - t
            self.contours[-1].append((u * u * p0[0] + 2 * u * t * p1[0] + t * t * p2[0],
                                      u * u * p0[1] + 2 * u * t * p1[1] + t * t * p2[1]))


@functools.lru_cache(maxsize=4096)
def rasterise(ref: GlyphRef, size: int = 96, margin: float = 0.1) -> np.ndarray:
    """Glyph as a float32 (size, size) ink mask in [0, 1], aspect kept, centred.

    Contours are XOR-filled, which equals the font's fill for the usual case of
    non-overlapping outer/inner contours, and is 4x supersampled for smooth edges.
    """
    font = _font(ref.font)
    pen = _PolylinePen(font.getGlyphSet())
    font.getGlyphSet()[ref.glyph].draw(pen)
    contours = [c for c in pen.contours if len(c) >= 3]
    if not contours:
        raise UserError(f"glyph {ref.glyph} of {ref.font} has no outline")
    pts = np.concatenate([np.asarray(c) for c in contours])
    lo, hi = pts.min(0), pts.max(0)
    extent = max(hi - lo) or 1.0
    sup = 4 * size
    scale = sup * (1 - 2 * margin) / extent
    offset = (sup - (hi - lo) * scale) / 2
    canvas = Image.new("1", (sup, sup), 0)
    for contour in contours:
        c = (np.asarray(contour) - lo) * scale + offset
        c[:, 1] = sup - c[:, 1]                     # font y grows up, image y grows down
        layer = Image.new("1", (sup, sup), 0)
        ImageDraw.Draw(layer).polygon([tuple(p) for p in c], fill=1)
        canvas = ImageChops.logical_xor(canvas, layer)
    small = canvas.convert("L").resize((size, size), Image.BOX)
    return np.asarray(small, dtype=np.float32) / 255.0
