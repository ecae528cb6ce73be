"""The sign inventory of one clustering: what an epigrapher looks at first.

    signclust inventory lm cypriot --seed 0        # = python -m signclust.reports.inventory ...

For each found type: an exemplar (the medoid of its members by mean L1), its token count and a
strip of members drawn from as many hands as possible; with gold labels also its majority sign,
its purity (a bar: green at or above ``impure_below``, amber below, red below 0.5) and the other
signs it holds, plus the gold signs split over several found types and the found types that merge
several gold signs. A partly labelled corpus (an epigrapher's known signs, the rest blank) shows the
same, counted over its labelled tokens only; a type with no labelled token shows none.

Writes reports/inventory/<method>_<corpus>.html, one self-contained interactive page (inline
data, CSS and script, no network; see reports/inventory_assets.py): sort by size, purity or gold
sign, search a gold label, filter the impure types, click a type to see every member at full size
with its text and position; the split/merge lists link to the types. Every token image is its
own small PNG (4-bit grey), stored once per distinct image. Prints readably (print CSS). Also
reports/inventory/<method>_<corpus>.png, a sheet of the largest types (capped, the title says so).
"""
from __future__ import annotations

import argparse
import base64
import html
import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from signclust.config import REPO_ROOT, load_params
from signclust.data.corpus import Corpus
from signclust.distances.l1 import mean_l1
from signclust.errors import UserError, cli_main
from signclust.evaluation.metrics import score
from signclust.io import atomic_path, atomic_write_text
from signclust.models.base import load_result
from signclust.progress import status

DEFAULTS = {
    "strip": 12,            # member images shown per type
    "medoid_sample": 200,   # medoid on at most this many members: O(sample^2) distances per type
    "impure_below": 0.9,    # purity under this is marked red
    "min_share": 0.1,       # a sign/type counts in a split/merge when it holds >= this share
    "sheet_rows": 60,       # types drawn on the PNG sheet (the HTML lists all)
}
FRAME = (201, 195, 181)
LEVELS = {"ok": "#2f7d6d", "mid": "#c98b1c", "low": "#b8412f"}   # purity >= impure_below / >= 0.5 / below


def purity_level(purity: float | None, impure_below: float) -> str | None:
    if purity is None:
        return None
    return "ok" if purity >= impure_below else ("mid" if purity >= 0.5 else "low")


@dataclass
class FoundType:
    type_id: int
    members: np.ndarray                      # token ids
    exemplar: int                            # token id of the medoid
    strip: list[int]                         # token ids shown, diverse over hands
    majority: str | None = None              # majority gold sign (of its labelled members)
    purity: float | None = None              # the majority's share of its labelled members
    composition: list[tuple[str, int]] = field(default_factory=list)  # gold signs, most frequent first
    labelled: int = 0                        # members with a gold label

    @property
    def size(self) -> int:
        return len(self.members)


# -- building the inventory ----------------------------------------------------------------------

def medoid(images: np.ndarray, members: np.ndarray, sample: int, rng) -> int:
    """Member with the least mean L1 to the others (on a random subsample of large types)."""
    pool = members if len(members) <= sample else rng.choice(members, sample, replace=False)
    d = mean_l1(images[pool], images[pool])
    return int(pool[np.argmin(d.mean(axis=1))])


def diverse_pick(members: np.ndarray, groups: np.ndarray, k: int, rng, skip: int) -> list[int]:
    """Up to k members, one per group (hand, else text) in turn, so the strip shows variation."""
    members = members[members != skip]
    by_group: dict = {}
    for token in rng.permutation(members):
        by_group.setdefault(groups[token], []).append(int(token))
    queues = list(by_group.values())
    picked: list[int] = []
    while len(picked) < k and queues:
        for queue in queues:
            if queue and len(picked) < k:
                picked.append(queue.pop())
        queues = [q for q in queues if q]
    return picked


def hand_groups(corpus: Corpus) -> np.ndarray:
    """Per token: its hand where known, else its text (a text keeps one hand)."""
    hand = corpus.tokens["hand"].astype(str).to_numpy()
    text = corpus.tokens["text_id"].astype(str).to_numpy()
    return np.where(hand != "", hand, "text:" + text)


def gold_labels(corpus: Corpus) -> tuple[np.ndarray, np.ndarray]:
    """(each token's gold label, "" where it has none; which tokens have one)."""
    gold = corpus.tokens["label"].astype(str).to_numpy()
    return gold, gold != ""


def labelled_score(corpus: Corpus, labels: np.ndarray) -> dict | None:
    """``score`` of the tokens that carry a gold label (all of them on a labelled corpus); None when
    none does."""
    gold, labelled = gold_labels(corpus)
    if not labelled.any():
        return None
    return score(np.unique(gold[labelled], return_inverse=True)[1], np.asarray(labels)[labelled])


def build_types(corpus: Corpus, labels: np.ndarray, cfg: dict, seed: int = 0) -> list[FoundType]:
    rng = np.random.default_rng(seed)
    images = corpus.token_images()
    groups = hand_groups(corpus)
    gold, labelled = gold_labels(corpus)
    gold = gold if labelled.any() else None
    ids, counts = np.unique(labels, return_counts=True)
    types = []
    for type_id in ids[np.lexsort((ids, -counts))]:          # largest first, ties by id
        members = np.flatnonzero(labels == type_id)
        ex = medoid(images, members, int(cfg["medoid_sample"]), rng)
        t = FoundType(int(type_id), members, ex, diverse_pick(members, groups, int(cfg["strip"]), rng, ex))
        known = members[labelled[members]] if gold is not None else members[:0]
        if len(known):
            signs, n = np.unique(gold[known], return_counts=True)
            order = np.lexsort((signs, -n))
            t.composition = [(str(signs[i]), int(n[i])) for i in order]
            t.labelled = len(known)
            t.majority, t.purity = t.composition[0][0], t.composition[0][1] / t.labelled
        types.append(t)
    return types


def splits(corpus: Corpus, labels: np.ndarray, min_share: float) -> list[dict]:
    """Gold signs with >= 2 found types each holding >= min_share of the sign's tokens."""
    gold, labelled = gold_labels(corpus)
    out = []
    for sign in np.unique(gold[labelled]):
        found, n = np.unique(labels[gold == sign], return_counts=True)
        keep = n >= min_share * n.sum()
        if keep.sum() >= 2:
            order = np.argsort(-n[keep], kind="stable")
            out.append({"sign": str(sign), "tokens": int(n.sum()),
                        "types": [(int(found[keep][i]), int(n[keep][i])) for i in order],
                        "elsewhere": int(n[~keep].sum()), "elsewhere_types": int((~keep).sum())})
    return sorted(out, key=lambda s: (-s["tokens"], s["sign"]))


def merges(types: list[FoundType], min_share: float) -> list[dict]:
    """Found types with >= 2 gold signs each holding >= min_share of the type's labelled tokens."""
    out = []
    for t in types:
        big = [(sign, n) for sign, n in t.composition if n >= min_share * t.labelled]
        if len(big) >= 2:
            out.append({"type": t.type_id, "tokens": t.labelled, "signs": big,
                        "elsewhere": t.labelled - sum(n for _, n in big)})
    return out


# -- images ----------------------------------------------------------------------------------------

def display(img: np.ndarray) -> np.ndarray:
    """Stored ink-bright on dark; shown dark ink on light, as on a page."""
    return 255 - np.asarray(img, dtype=np.uint8)


def png_data_uri(gray: np.ndarray) -> str:
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(gray).save(buf, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def png_b64(gray: np.ndarray, levels: int = 16, floor: int = 40) -> str:
    """A token image for the page: base64 of a 4-bit grey PNG, dark ink on light. Ink below
    ``floor`` (of 255) is treated as paper (faint background noise) and the ink is shown at
    ``levels`` grey levels: a third of the bytes of the 8-bit image, the same glyph to the eye."""
    from PIL import Image
    ink = np.asarray(gray, dtype=np.uint8)
    ink = np.where(ink < floor, 0, ink).astype(np.uint16)
    q = ((levels - 1) - (ink * (levels - 1) + 127) // 255).astype(np.uint8)       # 0 = black ink
    im = Image.frombytes("P", (q.shape[1], q.shape[0]), q.tobytes())
    im.putpalette([int(round(v * 255 / (levels - 1))) for i in range(levels) for v in (i, i, i)])
    buf = io.BytesIO()
    im.save(buf, format="PNG", optimize=True, bits=4)
    return base64.b64encode(buf.getvalue()).decode("ascii")


# -- HTML ------------------------------------------------------------------------------------------

def _esc(x) -> str:
    return html.escape(str(x))


def _type_link(type_id: int) -> str:
    return f'<a class="t" href="#t{type_id}">type {type_id}</a>'


def split_table(items: list[dict]) -> str:
    if not items:
        return "<p>None: every gold sign lies essentially within one found type.</p>"
    rows = []
    for s in items:
        found = ", ".join(f"{_type_link(t)}&nbsp;({n})" for t, n in s["types"])
        if s["elsewhere"]:
            found += f' <span class="comp">+{s["elsewhere"]} in {s["elsewhere_types"]} other type(s)</span>'
        rows.append(f'<tr><td class="sign"><a href="#types" data-search="{_esc(s["sign"])}" '
                    f'title="show the types holding this sign">{_esc(s["sign"])}</a></td>'
                    f'<td class="num">{s["tokens"]}</td><td>{found}</td></tr>')
    return ('<table class="lists"><thead><tr><th>gold sign</th><th>tokens</th><th>found types (tokens)</th></tr>'
            "</thead><tbody>" + "".join(rows) + "</tbody></table>")


def merge_table(items: list[dict]) -> str:
    if not items:
        return "<p>None: no found type mixes several gold signs substantially.</p>"
    rows = []
    for m in items:
        signs = ", ".join(f'<span class="sign">{_esc(s)}</span>&nbsp;({n})' for s, n in m["signs"])
        if m["elsewhere"]:
            signs += f' <span class="comp">+{m["elsewhere"]} other</span>'
        rows.append(f'<tr><td>{_type_link(m["type"])}</td><td class="num">{m["tokens"]}</td>'
                    f"<td>{signs}</td></tr>")
    return ('<table class="lists"><thead><tr><th>found type</th><th>tokens</th><th>gold signs (tokens)</th></tr>'
            "</thead><tbody>" + "".join(rows) + "</tbody></table>")


def summary_items(corpus: Corpus, labels: np.ndarray, types: list[FoundType], names: dict, cfg: dict):
    items = [("corpus", names["corpus"]), ("method", names["method"]), ("seed", names["seed"]),
             ("tokens", corpus.n_tokens)]
    s = labelled_score(corpus, labels)
    if corpus.has_labels:
        n_impure = sum(t.purity < cfg["impure_below"] for t in types)
        items += [("K found / K true", f"{s['k_found']} / {s['k_true']}"), ("V-measure", f"{s['v_measure']:.3f}"),
                  ("purity", f"{s['purity']:.3f}"), ("ACC", f"{s['acc']:.3f}"),
                  (f"types below purity {cfg['impure_below']:.2f}", f"{n_impure} of {len(types)}")]
    elif s is not None:                                   # scored on the labelled tokens alone
        labelled = gold_labels(corpus)[1]
        scored = [t for t in types if t.labelled]
        n_impure = sum(t.purity < cfg["impure_below"] for t in scored)
        items += [("K found", len(types)), ("labelled tokens", f"{int(labelled.sum())} of {corpus.n_tokens}"),
                  ("their K found / K true", f"{s['k_found']} / {s['k_true']}"),
                  ("their V-measure", f"{s['v_measure']:.3f}"), ("their purity", f"{s['purity']:.3f}"),
                  (f"types below purity {cfg['impure_below']:.2f}", f"{n_impure} of {len(scored)} with a label")]
    else:
        items += [("K found", len(types)), ("gold labels", "none")]
    return items


def _codes(values) -> tuple[list[str], list[int]]:
    uniq, inverse = np.unique(np.asarray(values, dtype=str), return_inverse=True)
    return [str(u) for u in uniq], inverse.astype(int).tolist()


def page_data(corpus: Corpus, labels: np.ndarray, types: list[FoundType], cfg: dict) -> dict:
    """Everything the page's script renders: per type its members (token ids), per token its
    image (an index into the deduplicated images: tokens sharing an image share one PNG), text id,
    position, gold sign and hand, columnar to keep the file small."""
    tok = corpus.tokens
    gold_str, labelled = gold_labels(corpus)
    gold = bool(labelled.any())
    used, image_of_token = np.unique(corpus.image_index(), return_inverse=True)   # only images in use
    texts, text_code = _codes(tok["text_id"].astype(str))
    hands_raw = tok["hand"].astype(str).to_numpy()
    hands, hand_code = _codes(hands_raw)
    hand_code = [c if h != "" else -1 for c, h in zip(hand_code, hands_raw)]
    tokens = {"img": image_of_token.astype(int).tolist(), "text": text_code,
              "pos": tok["position"].astype(int).tolist(), "hand": hand_code}
    data = {"gold": gold, "partial": gold and not labelled.all(), "impure_below": float(cfg["impure_below"]), "strip": int(cfg["strip"]),
            "texts": texts, "hands": hands, "labels": [], "tokens": tokens,
            "images": [png_b64(corpus.images[i]) for i in used]}
    if gold:                       # code -1: no label
        data["labels"], codes = _codes(gold_str[labelled])
        tokens["gold"] = np.full(len(gold_str), -1, dtype=int)
        tokens["gold"][labelled] = codes
        tokens["gold"] = tokens["gold"].tolist()
    data["types"] = [{"id": t.type_id, "size": t.size, "exemplar": int(t.exemplar),
                      "strip": [int(k) for k in t.strip], "members": t.members.astype(int).tolist(),
                      "majority": t.majority, "purity": None if t.purity is None else round(float(t.purity), 4),
                      "comp": [[s, n] for s, n in t.composition]} for t in types]
    return data


def render_html(corpus: Corpus, labels: np.ndarray, types: list[FoundType], names: dict, cfg: dict) -> str:
    """One self-contained page (inline data, CSS and script; no network): sortable, searchable
    table of the found types, a panel with every member of a type, split and merge lists."""
    import json

    from signclust.reports.inventory_assets import CSS, JS
    labelled = gold_labels(corpus)[1]
    gold, partial = bool(labelled.any()), not labelled.all()
    title = f"Sign inventory: {names['corpus']} by {names['method']}"
    summary = "".join(f"<div><b>{_esc(v)}</b><span>{_esc(k)}</span></div>"
                      for k, v in summary_items(corpus, labels, types, names, cfg))
    head = ["#", "type", "exemplar", "tokens"] + (["majority sign", "purity", "also"] if gold else []) + \
        [f"members (up to {cfg['strip']}, across hands)"]
    payload = json.dumps(page_data(corpus, labels, types, cfg), ensure_ascii=False, separators=(",", ":"))
    payload = payload.replace("</", "<\\/")         # never close the script element early
    example = next((t.majority for t in types if t.majority is not None), "")
    sorts = [("size", "size, largest first"), ("size_asc", "size, smallest first")]
    if gold:
        sorts += [("purity", "purity, lowest first"), ("purity_desc", "purity, highest first"),
                  ("sign", "majority gold sign")]
    sorts += [("id", "type id")]
    controls = (
        '<div class="controls" role="search">'
        '<label>sort <select id="sort">' + "".join(f'<option value="{k}">{v}</option>' for k, v in sorts)
        + "</select></label>"
        + (f'<label>gold sign <input id="q" type="search" placeholder="a gold label, e.g. {_esc(example)} or '
           f'&quot;{_esc(example)}&quot; (exact)"></label>'
           f'<label><input id="low" type="checkbox"> only types below purity {cfg["impure_below"]:.2f}</label>'
           if gold else '<input id="q" type="hidden" value="">')
        + '<span id="shown"></span></div>')
    parts = [
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_esc(title)}</title><style>{CSS}</style></head><body>",
        f"<header><h1>{_esc(title)}</h1><div class=\"summary\">{summary}</div>",
        '<p class="note">Found types, largest first. Click a type to see all its members at full size with '
        "their text and position. Exemplar: the medoid of the type's members by mean L1 pixel distance (on at "
        f"most {cfg['medoid_sample']} members); the strip shows members from as many hands (else texts) as "
        "possible. Token images are shown at 16 grey levels."
        + (" Purity: share of the majority gold sign, drawn as a bar; below "
           f"{cfg['impure_below']:.2f} it is marked <span class=\"tag mid\">impure</span>, below 0.50 "
           "<span class=\"tag low\">mixed</span>. Splits and merges count a sign or type holding at least "
           f"{cfg['min_share']:.0%} of the tokens." if gold else "")
        + (f" Only {int(labelled.sum())} of {corpus.n_tokens} tokens carry a gold label: majority, purity and "
           "the split and merge lists count those alone, and a type with none of them shows –."
           if gold and partial else "") + "</p>",
        '<nav><a href="#types">types</a>' + ('<a href="#splits">split signs</a><a href="#merges">merged types</a>'
                                             if gold else "") + "</nav></header>",
        "<noscript><p><b>This inventory is drawn by its inline script; enable JavaScript, or see the PNG sheet "
        "next to this file.</b></p></noscript>",
        f'<section id="types"><h2>Found types ({len(types)})</h2>{controls}<table><thead><tr>'
        + "".join(f"<th>{_esc(h)}</th>" for h in head) + "</tr></thead><tbody></tbody></table></section>",
    ]
    if gold:
        split_items = splits(corpus, labels, cfg["min_share"])
        merge_items = merges(types, cfg["min_share"])
        parts += [f'<section id="splits"><h2>Gold signs split over several found types ({len(split_items)})</h2>'
                  + split_table(split_items) + "</section>",
                  f'<section id="merges"><h2>Found types merging several gold signs ({len(merge_items)})</h2>'
                  + merge_table(merge_items) + "</section>"]
    parts += ['<div id="detail" role="dialog" aria-modal="true"><div class="panel"><header><h3></h3>'
              '<span class="facts"></span><button class="close" title="close (Esc)">×</button></header>'
              '<div class="body"></div></div></div>',
              f'<script type="application/json" id="inventory-data">{payload}</script>',
              f"<script>{JS}</script>", "</body></html>"]
    return "\n".join(parts) + "\n"


# -- PNG sheet -------------------------------------------------------------------------------------

def sheet_mosaic(images: np.ndarray, types: list[FoundType], cfg: dict, gold: bool) -> np.ndarray:
    """RGB mosaic: per row the exemplar (framed), a gap, then the member strip."""
    h, w = images.shape[1:]
    cell, gap, n_strip = max(h, w) + 6, 14, int(cfg["strip"])
    out = np.full((len(types) * cell, cell * (n_strip + 1) + gap, 3), 255, dtype=np.uint8)
    for row, t in enumerate(types):
        y = row * cell + 3
        out[y - 3:y + h + 3, 0:w + 6] = FRAME        # sets the exemplar apart from the strip
        out[y:y + h, 3:3 + w, :] = display(images[t.exemplar])[..., None]
        for col, token in enumerate(t.strip[:n_strip]):
            x = cell * (col + 1) + gap + 3
            out[y:y + h, x:x + w, :] = display(images[token])[..., None]
    return out


def short_labels(labels, width: int = 18) -> dict[str, str]:
    """Each gold label as the PNG sheet prints it: the words every label of the corpus shares dropped
    ("GREEK SMALL LETTER ALPHA" -> "SMALL ALPHA" when all are Greek letters), then, if still longer
    than ``width``, its end after an ellipsis (the end of a label tells signs apart: "...IDEOGRAPH-4EBA")."""
    labels = sorted({str(x) for x in labels})
    shared = set.intersection(*(set(x.split()) for x in labels)) if len(labels) > 1 else set()
    out = {}
    for label in labels:
        kept = " ".join(w for w in label.split() if w not in shared) or label
        out[label] = kept if len(kept) <= width else "…" + kept[-(width - 1):]
    return out


def render_sheet(corpus: Corpus, labels: np.ndarray, types: list[FoundType], names: dict, cfg: dict,
                 path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gold_str, labelled = gold_labels(corpus)
    gold = bool(labelled.any())
    shown = types[:int(cfg["sheet_rows"])]
    images = corpus.token_images()
    mosaic = sheet_mosaic(images, shown, cfg, gold)
    cell = mosaic.shape[0] // max(1, len(shown))
    text_px, dpi = 300 if gold else 230, 100
    fig = plt.figure(figsize=((mosaic.shape[1] + text_px + 20) / dpi, (mosaic.shape[0] + 90) / dpi), dpi=dpi)
    ax = fig.add_axes([text_px / (mosaic.shape[1] + text_px + 20), 10 / (mosaic.shape[0] + 90),
                       mosaic.shape[1] / (mosaic.shape[1] + text_px + 20), mosaic.shape[0] / (mosaic.shape[0] + 90)])
    ax.imshow(mosaic, interpolation="nearest")
    ax.axis("off")
    from matplotlib.patches import Rectangle
    bar_w = 60
    short = short_labels(gold_str[labelled]) if gold else {}
    for row, t in enumerate(shown):
        line = f"#{row + 1}  type {t.type_id}  n={t.size}"
        if gold:
            line += (f"\n{short[t.majority]}  purity {t.purity:.2f}" if t.majority is not None else "\nno labelled token")
        ax.text(-10 - (bar_w + 8 if gold else 0), row * cell + cell / 2, line, ha="right", va="center", fontsize=8,
                color="#1d232b")
        if t.purity is not None:       # a purity bar, coloured by level, instead of painting impure rows red
            y0 = row * cell + cell / 2 - 3
            ax.add_patch(Rectangle((-10 - bar_w, y0), bar_w, 6, facecolor="#e4dfd3", edgecolor="none", clip_on=False))
            ax.add_patch(Rectangle((-10 - bar_w, y0), bar_w * t.purity, 6, clip_on=False, edgecolor="none",
                                   facecolor=LEVELS[purity_level(t.purity, cfg["impure_below"])]))
    head = f"Sign inventory: {names['corpus']} by {names['method']} (seed {names['seed']})"
    s = labelled_score(corpus, labels)
    if corpus.has_labels:
        head += f" — K found {s['k_found']} vs K true {s['k_true']}, V-measure {s['v_measure']:.3f}"
    elif s is not None:
        head += (f" — K found {len(types)}; on its {int(labelled.sum())} labelled tokens V-measure {s['v_measure']:.3f}"
                 f" ({s['k_true']} signs)")
    sub = (f"largest {len(shown)} of {len(types)} found types shown" if len(shown) < len(types)
           else f"all {len(types)} found types")
    hands = (corpus.tokens["hand"].astype(str) != "").any()
    sub += f"; exemplar (medoid) then members{' across hands' if hands else ''}" + (
        f"; bar = purity (green >= {cfg['impure_below']:.2f}, amber >= 0.50, red below)" if gold else "")
    fig.text(0.01, 1 - 28 / fig.bbox.height, head, fontsize=11, fontweight="bold", va="center")
    fig.text(0.01, 1 - 56 / fig.bbox.height, sub, fontsize=9, color="#555", va="center")
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")
    plt.close(fig)


# -- entry points ----------------------------------------------------------------------------------

def config(params: dict | None = None) -> dict:
    """DEFAULTS overlaid with params.yaml ``report.inventory``, when present."""
    params = load_params() if params is None else params
    return {**DEFAULTS, **((params.get("report") or {}).get("inventory") or {})}


def write_inventory(corpus: Corpus, labels: np.ndarray, out_dir: Path, names: dict, cfg: dict) -> tuple[Path, Path]:
    labels = np.asarray(labels)
    if len(labels) != corpus.n_tokens:
        raise UserError(f"assignment has {len(labels)} tokens, corpus has {corpus.n_tokens}")
    types = build_types(corpus, labels, cfg, seed=int(names.get("seed", 0)))
    stem = f"{names['method']}_{names['corpus']}"
    html_path, png_path = Path(out_dir) / f"{stem}.html", Path(out_dir) / f"{stem}.png"
    atomic_write_text(html_path, render_html(corpus, labels, types, names, cfg))
    render_sheet(corpus, labels, types, names, cfg, png_path)
    return html_path, png_path


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("method")
    ap.add_argument("corpus")
    ap.add_argument("--seed", type=int, default=0, help="which run folder seed<k>/ (default 0)")
    ap.add_argument("--corpus-dir", help="default data/corpora/<corpus>")
    ap.add_argument("--run-dir", help="default models/runs/<method>/<corpus>/seed<k>")
    ap.add_argument("--out-dir", help="default reports/inventory")
    args = ap.parse_args(argv)
    corpus = Corpus.load(args.corpus_dir or REPO_ROOT / "data" / "corpora" / args.corpus)
    run_dir = Path(args.run_dir or REPO_ROOT / "models" / "runs" / args.method / args.corpus / f"seed{args.seed}")
    if not run_dir.is_dir():
        from signclust.evaluation.evaluate import missing_run_message, seed_folders
        seeds = [f"seed{k}" for k, _ in seed_folders(run_dir.parent)]
        raise UserError(f"no run folder {run_dir}; seeds trained: {', '.join(seeds)}" if seeds
                        else missing_run_message(run_dir.parent))
    result = load_result(run_dir)
    names = {"method": args.method, "corpus": args.corpus, "seed": args.seed}
    with status(f"inventory {args.method}/{args.corpus}: {corpus.n_tokens} tokens, "
                f"{len(np.unique(result.labels))} types") as st:
        paths = write_inventory(corpus, result.labels, Path(args.out_dir or REPO_ROOT / "reports" / "inventory"),
                                names, config())
        st.done(f"{paths[0].stat().st_size / 1e6:.1f} MB page")
    print("inventory -> " + ", ".join(map(str, paths)))


if __name__ == "__main__":
    main()
