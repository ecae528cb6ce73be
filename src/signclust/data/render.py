"""Render sign tokens the way scribes vary: a text keeps one hand, tokens jitter around it.

A *hand* fixes the font, the allograph chosen for each sign, stroke weight,
slant, scale, a smooth elastic warp and the ink/noise level. Every token of a
text written by that hand gets the hand's style plus small independent jitter
(pose, a weaker warp of its own, noise). Everything is drawn from
``numpy.random.default_rng`` streams keyed by (seed, hand) and (seed, token),
so a corpus is identical for the same seed regardless of rendering order.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from signclust.data.fonts import SCRIPT_FONTS, GlyphRef, rasterise, variants
from signclust.errors import UserError

MASTER = 96   # glyph outlines are rasterised once at this size, then warped down to the output size


def _key(*parts) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "little")


@dataclass(frozen=True)
class Hand:
    font: str
    allograph_seed: int
    stroke: int          # dilation (+) / erosion (-) radius in master pixels
    slant: float         # horizontal shear
    scale: float
    warp: np.ndarray     # (2, 4, 4) coarse displacement grid, output pixels
    ink: float           # ink intensity in (0, 1]
    noise: float         # std of additive noise, intensity units


def make_hand(script: str, hand_id: str, seed: int, cfg: dict) -> Hand:
    rng = np.random.default_rng(_key("hand", script, hand_id, seed))
    fonts = SCRIPT_FONTS[script]
    return Hand(
        font=fonts[rng.integers(len(fonts))],
        allograph_seed=int(rng.integers(2**31)),
        stroke=int(rng.integers(cfg["stroke_min"], cfg["stroke_max"] + 1)),
        slant=float(rng.uniform(-cfg["slant"], cfg["slant"])),
        scale=float(rng.uniform(cfg["scale_min"], 1.0)),
        warp=rng.normal(0, cfg["hand_warp"], size=(2, 4, 4)),
        ink=float(rng.uniform(cfg["ink_min"], 1.0)),
        noise=float(rng.uniform(0, cfg["noise"])),
    )


def glyph_for(hand: Hand, ch: str) -> GlyphRef:
    """The hand's allograph for a sign; falls back to the script's other fonts if its font lacks it."""
    opts = variants(hand.font, ord(ch))
    if not opts:
        for script_fonts in SCRIPT_FONTS.values():
            for font in script_fonts:
                opts = variants(font, ord(ch))
                if opts:
                    break
            if opts:
                break
    if not opts:
        raise UserError(f"no installed font has a glyph for U+{ord(ch):X}")
    return opts[_key(hand.allograph_seed, ord(ch)) % len(opts)]


def _stroked(ref: GlyphRef, stroke: int) -> np.ndarray:
    base = rasterise(ref, MASTER)
    if stroke == 0:
        return base
    size = 2 * abs(stroke) + 1
    yy, xx = np.mgrid[-abs(stroke):abs(stroke) + 1, -abs(stroke):abs(stroke) + 1]
    disk = (xx**2 + yy**2) <= abs(stroke) ** 2 + 0.5
    op = ndimage.grey_dilation if stroke > 0 else ndimage.grey_erosion
    return op(base, footprint=disk[:size, :size])


def _smooth_field(coarse: np.ndarray, size: int) -> np.ndarray:
    """Upsample a (2, g, g) coarse displacement grid to a smooth (2, size, size) field."""
    return np.stack([ndimage.zoom(c, size / c.shape[0], order=3) for c in coarse])


class Renderer:
    def __init__(self, script: str, cfg: dict, seed: int):
        if script not in SCRIPT_FONTS:
            raise UserError(f"no fonts configured for script '{script}'")
        self.script, self.cfg, self.seed = script, cfg, seed
        self.size = int(cfg["image_size"])
        self._master_cache: dict = {}
        self._hands: dict = {}

    def hand(self, hand_id: str) -> Hand:
        if hand_id not in self._hands:
            self._hands[hand_id] = make_hand(self.script, hand_id, self.seed, self.cfg)
        return self._hands[hand_id]

    def master(self, hand: Hand, ch: str) -> np.ndarray:
        ref = glyph_for(hand, ch)
        key = (ref, hand.stroke)
        if key not in self._master_cache:
            self._master_cache[key] = _stroked(ref, hand.stroke)
        return self._master_cache[key]

    def token(self, ch: str, hand_id: str, token_key: str) -> np.ndarray:
        """One token image, uint8 (size, size), ink bright on dark."""
        cfg, size = self.cfg, self.size
        hand = self.hand(hand_id)
        master = self.master(hand, ch)
        rng = np.random.default_rng(_key("token", self.script, token_key, self.seed))
        angle = np.deg2rad(rng.normal(0, cfg["jitter_rotate"]))
        scale = hand.scale * (1 + rng.normal(0, cfg["jitter_scale"]))
        shear = hand.slant + rng.normal(0, cfg["jitter_shear"])
        shift = rng.normal(0, cfg["jitter_shift"], size=2)
        # output pixel (y, x) -> master coordinates: inverse of scale . shear . rotate about the centre
        c = (size - 1) / 2
        yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
        field = _smooth_field(hand.warp + rng.normal(0, cfg["token_warp"], size=(2, 4, 4)), size)
        y = yy - c - shift[0] + field[0]
        x = xx - c - shift[1] + field[1]
        cos, sin = np.cos(angle), np.sin(angle)
        yr, xr = cos * y - sin * x, sin * y + cos * x
        xr = xr - shear * yr
        k = MASTER / size / scale
        coords = np.stack([yr * k + (MASTER - 1) / 2, xr * k + (MASTER - 1) / 2])
        img = ndimage.map_coordinates(master, coords, order=1, mode="constant", cval=0.0)
        img = img * hand.ink * rng.uniform(0.9, 1.0)
        img = img + rng.normal(0, hand.noise, size=img.shape)
        speckles = rng.random(img.shape) < cfg["speckle"]
        img[speckles] = rng.uniform(0.3, 1.0, size=int(speckles.sum()))
        return np.clip(np.rint(img * 255), 0, 255).astype(np.uint8)
