"""The sign inventory of one clustering: what an epigrapher looks at first.

    python -m signclust.reports.inventory kmeans cypriot --seed 0

For each found type, largest first: an exemplar (the medoid of its members by mean L1),
its token count and a strip of members drawn from as many hands as possible. With gold
labels also its majority sign and purity (impure types marked red), the gold signs split
over several found types and the found types that merge several gold signs.

Writes reports/inventory/<method>_<corpus>.html (self-contained: images inlined as
base64 PNG, inline CSS, no scripts) and reports/inventory/<method>_<corpus>.png (a sheet
of the largest types; the number shown is capped, the title says so).
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

DEFAULTS = {
    "strip": 12,            # member images shown per type
    "medoid_sample": 200,   # medoid on at most this many members: O(sample^2) distances per type
    "impure_below": 0.9,    # purity under this is marked red
    "min_share": 0.1,       # a sign/type counts in a split/merge when it holds >= this share
    "sheet_rows": 60,       # types drawn on the PNG sheet (the HTML lists all)
}
RED = (200, 30, 30)
FRAME = (201, 195, 181)


@dataclass
class FoundType:
    type_id: int
    members: np.ndarray                      # token ids
    exemplar: int                            # token id of the medoid
    strip: list[int]                         # token ids shown, diverse over hands
    majority: str | None = None              # majority gold sign
    purity: float | None = None
    composition: list[tuple[str, int]] = field(default_factory=list)  # gold signs, most frequent first

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


def build_types(corpus: Corpus, labels: np.ndarray, cfg: dict, seed: int = 0) -> list[FoundType]:
    rng = np.random.default_rng(seed)
    images = corpus.token_images()
    groups = hand_groups(corpus)
    gold = corpus.tokens["label"].astype(str).to_numpy() if corpus.has_labels else None
    ids, counts = np.unique(labels, return_counts=True)
    types = []
    for type_id in ids[np.lexsort((ids, -counts))]:          # largest first, ties by id
        members = np.flatnonzero(labels == type_id)
        ex = medoid(images, members, int(cfg["medoid_sample"]), rng)
        t = FoundType(int(type_id), members, ex, diverse_pick(members, groups, int(cfg["strip"]), rng, ex))
        if gold is not None:
            signs, n = np.unique(gold[members], return_counts=True)
            order = np.lexsort((signs, -n))
            t.composition = [(str(signs[i]), int(n[i])) for i in order]
            t.majority, t.purity = t.composition[0][0], t.composition[0][1] / t.size
        types.append(t)
    return types


def splits(corpus: Corpus, labels: np.ndarray, min_share: float) -> list[dict]:
    """Gold signs with >= 2 found types each holding >= min_share of the sign's tokens."""
    gold = corpus.tokens["label"].astype(str).to_numpy()
    out = []
    for sign in np.unique(gold):
        found, n = np.unique(labels[gold == sign], return_counts=True)
        keep = n >= min_share * n.sum()
        if keep.sum() >= 2:
            order = np.argsort(-n[keep], kind="stable")
            out.append({"sign": str(sign), "tokens": int(n.sum()),
                        "types": [(int(found[keep][i]), int(n[keep][i])) for i in order],
                        "elsewhere": int(n[~keep].sum()), "elsewhere_types": int((~keep).sum())})
    return sorted(out, key=lambda s: (-s["tokens"], s["sign"]))


def merges(types: list[FoundType], min_share: float) -> list[dict]:
    """Found types with >= 2 gold signs each holding >= min_share of the type's tokens."""
    out = []
    for t in types:
        big = [(sign, n) for sign, n in t.composition if n >= min_share * t.size]
        if len(big) >= 2:
            out.append({"type": t.type_id, "tokens": t.size, "signs": big,
                        "elsewhere": t.size - sum(n for _, n in big)})
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


def strip_image(images: np.ndarray, gap: int = 4) -> np.ndarray:
    """Images side by side on white, one PNG per strip instead of one per token."""
    h, w = images.shape[1:]
    out = np.full((h, max(1, len(images) * (w + gap) - gap)), 255, dtype=np.uint8)
    for i, img in enumerate(images):
        out[:, i * (w + gap):i * (w + gap) + w] = display(img)
    return out


# -- HTML ------------------------------------------------------------------------------------------

CSS = """
body { font: 15px/1.45 "Source Sans 3", "Segoe UI", Helvetica, Arial, sans-serif; color: #1d232b;
       background: #fbfaf7; margin: 0 auto; max-width: 1280px; padding: 1.5rem 2rem 4rem; }
h1 { font-size: 1.6rem; margin: 0 0 .4rem; font-weight: 600; }
h2 { font-size: 1.2rem; margin: 2.2rem 0 .6rem; border-bottom: 1px solid #ddd8cc; padding-bottom: .2rem; }
.summary { display: flex; flex-wrap: wrap; gap: .5rem 2rem; margin: .8rem 0; }
.summary div { display: flex; flex-direction: column; }
.summary b { font-size: 1.35rem; font-variant-numeric: tabular-nums; }
.summary span { color: #6b6558; font-size: .8rem; text-transform: uppercase; letter-spacing: .04em; }
.note { color: #6b6558; font-size: .88rem; max-width: 70rem; }
nav a { margin-right: 1.2rem; color: #35608d; }
table { border-collapse: collapse; width: 100%; }
th { text-align: left; font-weight: 600; font-size: .8rem; color: #6b6558; text-transform: uppercase;
     letter-spacing: .04em; border-bottom: 2px solid #ddd8cc; padding: .3rem .5rem; }
td { padding: .35rem .5rem; border-bottom: 1px solid #ece8de; vertical-align: middle; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.type td:first-child { border-left: 4px solid transparent; }
tr.impure td:first-child { border-left-color: #c81e1e; }
tr.impure { background: #fdf1ef; }
img.ex { width: 64px; height: 64px; border: 2px solid #c9c3b5; background: #fff; border-radius: 3px; }
tr.impure img.ex { border-color: #c81e1e; }
img.strip { height: 44px; }
.badge { display: inline-block; background: #c81e1e; color: #fff; font-size: .7rem; font-weight: 600;
         padding: .05rem .4rem; border-radius: .6rem; margin-left: .4rem; letter-spacing: .03em; }
.sign { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: .92rem; }
.comp { color: #6b6558; font-size: .82rem; }
a.t { color: #35608d; text-decoration: none; font-variant-numeric: tabular-nums; }
"""


def _esc(x) -> str:
    return html.escape(str(x))


def _type_link(type_id: int) -> str:
    return f'<a class="t" href="#t{type_id}">type {type_id}</a>'


def type_row(rank: int, t: FoundType, images: np.ndarray, cfg: dict, gold: bool) -> str:
    impure = gold and t.purity < cfg["impure_below"]
    badge = '<span class="badge">impure</span>' if impure else ""
    cells = [f'<td class="num">{rank}</td>',
             f'<td id="t{t.type_id}">type {t.type_id}{badge}</td>',
             f'<td><img class="ex" alt="exemplar of type {t.type_id}" '
             f'src="{png_data_uri(display(images[t.exemplar]))}"></td>',
             f'<td class="num">{t.size}</td>']
    if gold:
        comp = ", ".join(f"{_esc(s)}&nbsp;{n}" for s, n in t.composition[1:4])
        more = f" +{len(t.composition) - 4} more" if len(t.composition) > 4 else ""
        cells += [f'<td class="sign">{_esc(t.majority)}</td>', f'<td class="num">{t.purity:.2f}</td>',
                  f'<td class="comp">{comp}{more}</td>']
    strip = (f'<img class="strip" alt="members" src="{png_data_uri(strip_image(images[t.strip]))}">'
             if t.strip else "")
    cells.append(f"<td>{strip}</td>")
    cls = "type impure" if impure else "type"
    return f'<tr class="{cls}">' + "".join(cells) + "</tr>"


def split_table(items: list[dict]) -> str:
    if not items:
        return "<p>None: every gold sign lies essentially within one found type.</p>"
    rows = []
    for s in items:
        found = ", ".join(f"{_type_link(t)}&nbsp;({n})" for t, n in s["types"])
        if s["elsewhere"]:
            found += f' <span class="comp">+{s["elsewhere"]} in {s["elsewhere_types"]} other type(s)</span>'
        rows.append(f'<tr><td class="sign">{_esc(s["sign"])}</td><td class="num">{s["tokens"]}</td>'
                    f"<td>{found}</td></tr>")
    return ("<table><tr><th>gold sign</th><th>tokens</th><th>found types (tokens)</th></tr>"
            + "".join(rows) + "</table>")


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
    return ("<table><tr><th>found type</th><th>tokens</th><th>gold signs (tokens)</th></tr>"
            + "".join(rows) + "</table>")


def summary_items(corpus: Corpus, labels: np.ndarray, types: list[FoundType], names: dict, cfg: dict):
    items = [("corpus", names["corpus"]), ("method", names["method"]), ("seed", names["seed"]),
             ("tokens", corpus.n_tokens)]
    if corpus.has_labels:
        s = score(corpus.labels(), labels)
        n_impure = sum(t.purity < cfg["impure_below"] for t in types)
        items += [("K found / K true", f"{s['k_found']} / {s['k_true']}"), ("V-measure", f"{s['v_measure']:.3f}"),
                  ("purity", f"{s['purity']:.3f}"), ("ACC", f"{s['acc']:.3f}"), ("impure types", n_impure)]
    else:
        items += [("K found", len(types)), ("gold labels", "none")]
    return items


def render_html(corpus: Corpus, labels: np.ndarray, types: list[FoundType], names: dict, cfg: dict) -> str:
    gold = corpus.has_labels
    images = corpus.token_images()
    title = f"Sign inventory: {names['corpus']} by {names['method']}"
    summary = "".join(f"<div><b>{_esc(v)}</b><span>{_esc(k)}</span></div>"
                      for k, v in summary_items(corpus, labels, types, names, cfg))
    head = ["#", "type", "exemplar", "tokens"] + (["majority sign", "purity", "also"] if gold else []) + \
        [f"members (up to {cfg['strip']}, across hands)"]
    rows = "".join(type_row(i, t, images, cfg, gold) for i, t in enumerate(types, start=1))
    parts = [
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_esc(title)}</title><style>{CSS}</style></head><body>",
        f"<header><h1>{_esc(title)}</h1><div class=\"summary\">{summary}</div>",
        '<p class="note">Found types, largest first. Exemplar: the medoid of the type\'s members by mean '
        f"L1 pixel distance (on at most {cfg['medoid_sample']} members). Members are drawn from as many "
        "hands (else texts) as possible."
        + (f" Purity: share of the majority gold sign; below {cfg['impure_below']:.2f} the row is marked "
           "<span class=\"badge\">impure</span>. Splits and merges count a sign or type holding at least "
           f"{cfg['min_share']:.0%} of the tokens." if gold else "") + "</p>",
        '<nav><a href="#types">types</a>' + ('<a href="#splits">split signs</a><a href="#merges">merged types</a>'
                                             if gold else "") + "</nav></header>",
        f'<section id="types"><h2>Found types ({len(types)})</h2><table><tr>'
        + "".join(f"<th>{_esc(h)}</th>" for h in head) + f"</tr>{rows}</table></section>",
    ]
    if gold:
        split_items = splits(corpus, labels, cfg["min_share"])
        merge_items = merges(types, cfg["min_share"])
        parts += [f'<section id="splits"><h2>Gold signs split over several found types ({len(split_items)})</h2>'
                  + split_table(split_items) + "</section>",
                  f'<section id="merges"><h2>Found types merging several gold signs ({len(merge_items)})</h2>'
                  + merge_table(merge_items) + "</section>"]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# -- PNG sheet -------------------------------------------------------------------------------------

def sheet_mosaic(images: np.ndarray, types: list[FoundType], cfg: dict, gold: bool) -> np.ndarray:
    """RGB mosaic: per row the exemplar (red frame when impure), a gap, then the member strip."""
    h, w = images.shape[1:]
    cell, gap, n_strip = max(h, w) + 6, 14, int(cfg["strip"])
    out = np.full((len(types) * cell, cell * (n_strip + 1) + gap, 3), 255, dtype=np.uint8)
    for row, t in enumerate(types):
        y = row * cell + 3
        # frame the exemplar: red when impure, light grey otherwise (sets it apart from the strip)
        out[y - 3:y + h + 3, 0:w + 6] = RED if gold and t.purity < cfg["impure_below"] else FRAME
        out[y:y + h, 3:3 + w, :] = display(images[t.exemplar])[..., None]
        for col, token in enumerate(t.strip[:n_strip]):
            x = cell * (col + 1) + gap + 3
            out[y:y + h, x:x + w, :] = display(images[token])[..., None]
    return out


def render_sheet(corpus: Corpus, labels: np.ndarray, types: list[FoundType], names: dict, cfg: dict,
                 path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gold = corpus.has_labels
    shown = types[:int(cfg["sheet_rows"])]
    images = corpus.token_images()
    mosaic = sheet_mosaic(images, shown, cfg, gold)
    cell = mosaic.shape[0] // max(1, len(shown))
    text_px, dpi = 230, 100
    fig = plt.figure(figsize=((mosaic.shape[1] + text_px + 20) / dpi, (mosaic.shape[0] + 90) / dpi), dpi=dpi)
    ax = fig.add_axes([text_px / (mosaic.shape[1] + text_px + 20), 10 / (mosaic.shape[0] + 90),
                       mosaic.shape[1] / (mosaic.shape[1] + text_px + 20), mosaic.shape[0] / (mosaic.shape[0] + 90)])
    ax.imshow(mosaic, interpolation="nearest")
    ax.axis("off")
    for row, t in enumerate(shown):
        line = f"#{row + 1}  type {t.type_id}  n={t.size}"
        if gold:
            line += f"\n{t.majority[:16]}  purity {t.purity:.2f}"
        impure = gold and t.purity < cfg["impure_below"]
        ax.text(-10, row * cell + cell / 2, line, ha="right", va="center", fontsize=8,
                color="#c81e1e" if impure else "#1d232b", fontweight="bold" if impure else "normal")
    head = f"Sign inventory: {names['corpus']} by {names['method']} (seed {names['seed']})"
    if gold:
        s = score(corpus.labels(), labels)
        head += f" — K found {s['k_found']} vs K true {s['k_true']}, V-measure {s['v_measure']:.3f}"
    sub = (f"largest {len(shown)} of {len(types)} found types shown" if len(shown) < len(types)
           else f"all {len(types)} found types")
    sub += "; exemplar (medoid) then members across hands" + ("; red = purity < %.2f" % cfg["impure_below"]
                                                               if gold else "")
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
    result = load_result(run_dir)
    names = {"method": args.method, "corpus": args.corpus, "seed": args.seed}
    paths = write_inventory(corpus, result.labels, Path(args.out_dir or REPO_ROOT / "reports" / "inventory"),
                            names, config())
    print("inventory -> " + ", ".join(map(str, paths)))


if __name__ == "__main__":
    main()
