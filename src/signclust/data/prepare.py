"""Stage `prepare`: build a built-in corpus (real sign sequences, rendered in scribal hands)
or a corpus of the multi-script suite (``<script>_<regime>``, see ``signclust.data.suite``).

    python -m signclust.data.prepare lineara
    python -m signclust.data.prepare latin_free
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from signclust import tracking
from signclust.config import REPO_ROOT, section
from signclust.data import sources, suite
from signclust.data.contact_sheet import contact_sheet
from signclust.data.corpus import Corpus, check_corpus_out, dedupe_images
from signclust.data.fonts import FONT_FILES, SCRIPT_FONTS
from signclust.data.render import Renderer
from signclust.errors import UserError, cli_main

BUILTIN = ("lineara", "cypriot", "akkadian")


def load_sequences(name: str, cfg: dict, seed: int):
    if name == "lineara":
        return sources.lineara(include_numerals=cfg.get("include_numerals", False))
    if name == "cypriot":
        return sources.cypriot()
    if name == "akkadian":
        return sources.akkadian(int(cfg["n_tokens"]), seed)
    raise UserError(f"unknown built-in corpus '{name}'; known: {', '.join(BUILTIN)}")


def known_names(params: dict) -> list[str]:
    """Every corpus this stage builds: those of params.yaml ``prepare.corpora``, then the suite's
    <script>_<regime>."""
    return list(params.get("corpora") or {}) + suite.all_names()


def check_name(name: str, params: dict) -> None:
    names = known_names(params)
    if name not in names:
        import difflib
        close = difflib.get_close_matches(name, names, n=1)
        raise UserError(f"unknown corpus '{name}'" + (f" (did you mean '{close[0]}'?)" if close else "")
                        + f"; prepare builds: {', '.join(names)}")


def build(name: str, params: dict, progress: bool = True) -> Corpus:
    check_name(name, params)
    if name not in BUILTIN:
        return suite.build(name, params)
    cfg = params["corpora"][name]
    seed = int(params["seed"])
    texts, info = load_sequences(name, cfg, seed)
    texts_meta = info.pop("texts_meta", [{} for _ in texts])
    renderer = Renderer(name, {**params["render"], "image_size": params["image_size"]}, seed)
    rows, images = [], []
    n_total = sum(len(line) for text in texts for line in text)
    bar = tqdm(total=n_total, desc=f"render {name}", unit="tok", disable=not progress, mininterval=1)
    for t, (text, tmeta) in enumerate(zip(texts, texts_meta)):
        text_id = tmeta.get("id", f"{name}-{t:05d}")
        # texts by a known scribe share that scribe's hand; otherwise a text is its own hand
        hand_id = tmeta.get("scribe") or f"text:{text_id}"
        position = 0
        for line_no, line in enumerate(text):
            for ch in line:
                images.append(renderer.token(ch, hand_id, f"{text_id}/{position}"))
                rows.append((len(rows), text_id, line_no, position, sources.sign_label(ch), hand_id))
                position += 1
            bar.update(len(line))
    bar.close()
    uniq, image_index = dedupe_images(np.stack(images))
    tokens = pd.DataFrame(rows, columns=["token_id", "text_id", "line", "position", "label", "hand"])
    tokens["image_index"] = image_index
    fonts = {f: {"package": FONT_FILES[f][0], "licence": FONT_FILES[f][1]} for f in SCRIPT_FONTS[name]}
    meta = {"name": name, **info, "fonts": fonts, "render": params["render"], "seed": seed,
            "hands": int(tokens["hand"].nunique())}
    return Corpus(tokens, uniq, meta)


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", help=f"one of {', '.join(BUILTIN)}, or <script>_<regime> with script in "
                                   f"{', '.join(suite.SCRIPTS)} and regime in {', '.join(suite.REGIMES)}")
    ap.add_argument("--out", help="output folder (default data/corpora/<corpus>)")
    ap.add_argument("--sheet", help="contact sheet PNG (default reports/figures/contact_<corpus>.png)")
    args = ap.parse_args(argv)
    params = section("prepare")
    check_name(args.corpus, params)
    # replacing a corpus is what this stage does; replacing anything else is not
    out = check_corpus_out(args.out or REPO_ROOT / "data" / "corpora" / args.corpus, force=True)
    sheet = Path(args.sheet or REPO_ROOT / "reports" / "figures" / f"contact_{args.corpus}.png")
    t0 = time.time()
    corpus = build(args.corpus, params)
    corpus.save(out)
    sheet_args = {}
    if args.corpus not in BUILTIN:      # captions by code point, a clean reference glyph per row
        labels = corpus.tokens["label"].value_counts().index[:int(params["sheet_types"])]
        sheet_args = {"names": {lab: suite.short_name(lab) for lab in labels},
                      "references": suite.references(args.corpus, params, labels)}
    contact_sheet(corpus, sheet, n_types=int(params["sheet_types"]), per_type=int(params["sheet_tokens"]),
                  title=f"{args.corpus}: {corpus.meta['tokens']} tokens, {corpus.meta['types']} types",
                  **sheet_args)
    seconds = time.time() - t0
    counts = corpus.counts()
    print(f"{args.corpus}: {counts['texts']} texts, {counts['tokens']} tokens, {counts['types']} types, "
          f"{counts['images']} images, {corpus.meta['hands']} hands -> {out} ({seconds:.1f}s)")
    with tracking.run("prepare", args.corpus) as run:
        if args.corpus in BUILTIN:
            run.log_params({"corpus": args.corpus, **params["corpora"][args.corpus], "render": params["render"],
                            "image_size": params["image_size"], "seed": params["seed"]})
        else:
            script, regime = suite.parse_name(args.corpus)
            cfg = params["suite"]
            run.log_params({"corpus": args.corpus, "script": script, "regime": regime,
                            "n_tokens": cfg["n_tokens"], "max_len": cfg["max_len"], "fonts": cfg["fonts"][script],
                            regime: cfg.get(regime, {}), "image_size": params["image_size"],
                            "seed": params["seed"]})
        run.log_metrics({**counts, "hands": corpus.meta["hands"], "seconds": seconds})
        run.log_artifact(out / "meta.json")
        run.log_artifact(sheet)


if __name__ == "__main__":
    main()
