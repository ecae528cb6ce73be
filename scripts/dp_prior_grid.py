"""Would another NIW prior or feature size let DeepDPM find the number of signs? (issue 10)

    .venv/bin/python scripts/dp_prior_grid.py          # -> reports/deepdpm_prior_grid.md

DeepDPM's K is where its model's log p(X, z) peaks: `scripts/dp_posterior.py` finds its fit the best
labelling by that score on every corpus, with the row's prior, on the row's PCA of the pixels and on
the contrastive glyph encoder's features alike. This script asks whether a prior or a number of
dimensions other than the row's would move that peak to the truth, without fitting DeepDPM. For each
corpus, feature source (``pixels``: the row's own codes, PCA of the pixels with its one global scale;
``encoder``: the encoder's features reduced and scaled the same way, as ``dp_posterior.py --features
encoder``), number of dimensions and NIW scale matrix of the grid, it scores k-means labellings of the
features at K = K true x 1/16 ... 2 and the true labelling by ``deepdpm.dp_log_joint`` (the row's alpha,
kappa and nu) and reports the K of the best-scoring k-means labelling and how far the truth scores
below it. A cell whose best K is far from K true, with the truth below it, is a setting under which
DeepDPM's split/merge moves cannot find K true. Labels only score: nothing is chosen from them.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts"))

from dp_posterior import encoder_features, is_corpus, on_encoder_features  # noqa: E402
from signclust.config import load_params  # noqa: E402
from signclust.data.corpus import Corpus  # noqa: E402
from signclust.errors import UserError, cli_main  # noqa: E402
from signclust.evaluation.metrics import score  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models.base import FitContext, get_clusterer  # noqa: E402
from signclust.models.baselines._nets import faiss_kmeans  # noqa: E402
from signclust.models.baselines.deepdpm import NIWPrior, dp_log_joint  # noqa: E402
from signclust.models.train import run_config  # noqa: E402

CORPORA = ("cypriot", "lineara", "latin_hands", "latin_handwriting")
DIMS = (3, 5, 10, 20)
# (psi_choice, psi_scale): the row's (isotropic 0.005, the authors' default) first
PRIORS = (("isotropic", 0.005), ("isotropic", 0.05), ("isotropic", 0.5), ("isotropic", 2.0),
          ("data_cov", 0.05), ("data_cov", 0.5), ("data_cov", 2.0))
K_FACTORS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 3 / 4, 1, 3 / 2, 2)


def k_grid(k_true: int, n: int) -> list[int]:
    """K true x each factor, rounded, at least 2 and at most n / 4 (distinct, ascending)."""
    return sorted({k for k in (max(2, round(k_true * f)) for f in K_FACTORS) if k <= n // 4})


def codes(cfg: dict, corpus: Corpus, dim: int, source: str, enc: np.ndarray | None, seed: int) -> np.ndarray:
    """The row's codes of ``corpus`` at ``dim`` dimensions: its own (PCA of the pixels) or the
    encoder's features ``enc`` put through the same reduction and transform."""
    clusterer = get_clusterer("deepdpm", **{**cfg, "feat_dim": dim})
    if source == "encoder":
        on_encoder_features(clusterer, "deepdpm", enc)
    return clusterer.codes(corpus, FitContext(seed=seed, progress=False), None, None)


def cell(x: np.ndarray, labellings: dict, gold: np.ndarray, prior: NIWPrior, alpha: float) -> dict:
    """The best k-means labelling by log p (its K) and the truth's gap below it, nats per token."""
    log_p = {k: dp_log_joint(x, z, prior, alpha) for k, z in labellings.items()}
    best = max(log_p, key=log_p.get)
    return {"best_k": best, "gap": (log_p[best] - dp_log_joint(x, gold, prior, alpha)) / len(x)}


def corpus_rows(name: str, cfg: dict, seed: int, sources: list[str]) -> list[dict]:
    corpus = Corpus.load(REPO / "data" / "corpora" / name)
    gold = np.unique(np.asarray(corpus.labels()), return_inverse=True)[1]
    k_true = int(gold.max()) + 1
    enc = encoder_features(corpus, seed) if "encoder" in sources else None
    rows = []
    for source in sources:
        for dim in DIMS:
            x = codes(cfg, corpus, dim, source, enc, seed)
            ks = k_grid(k_true, len(x))
            labellings = {k: faiss_kmeans(x.astype(np.float32), k, seed=seed, niter=50, nredo=3)[0] for k in ks}
            v_at_k = float(score(gold, labellings[k_true])["v_measure"]) if k_true in labellings else float("nan")
            for choice, scale in PRIORS:
                prior = NIWPrior.from_data(x, kappa=float(cfg["kappa"]), nu=cfg["nu"], psi_choice=choice,
                                           psi_scale=scale)
                rows.append({"corpus": name, "k_true": k_true, "source": source, "dim": dim,
                             "prior": f"{choice} {scale:g}", "v_at_k": v_at_k, "grid": ks,
                             **cell(x, labellings, gold, prior, float(cfg["alpha"]))})
    return rows


def render(rows: list[dict], command: str, seed: int) -> str:
    lines = ["# DeepDPM's model under other priors and feature sizes", "",
             f"Generated by `{command}` (seed {seed}). Each cell: the K of the k-means labelling with the "
             "highest log p(X, z) of DeepDPM's model (`deepdpm.dp_log_joint`: the CRP with the row's alpha, "
             "each cluster's NIW marginal likelihood with full covariances, the row's kappa and nu = D + 2, the "
             "scale matrix of the column), then the truth's gap below that labelling in nats per token (negative: "
             "the truth scores higher). *pixels*: the row's codes, PCA of the pixels with one global scale; "
             "*encoder*: the contrastive glyph encoder's features, reduced and scaled the same way. *V at K true*: "
             "k-means of those features told K true (how far they separate the signs). The row runs isotropic "
             "0.005 on pixels at 10 dimensions. Labels only score: nothing is chosen from them.", ""]
    priors = [f"{c} {s:g}" for c, s in PRIORS]
    for name in dict.fromkeys(r["corpus"] for r in rows):
        mine = [r for r in rows if r["corpus"] == name]
        lines += [f"## {name}", "", f"K true {mine[0]['k_true']}; k-means at K = {', '.join(map(str, mine[0]['grid']))}.",
                  "", "| features | D | V at K true | " + " | ".join(priors) + " |",
                  "|---|---:|---:|" + "---|" * len(priors)]
        for source in dict.fromkeys(r["source"] for r in mine):
            for dim in DIMS:
                cells = {r["prior"]: r for r in mine if r["source"] == source and r["dim"] == dim}
                lines.append(f"| {source} | {dim} | {next(iter(cells.values()))['v_at_k']:.3f} | "
                             + " | ".join(f"{cells[p]['best_k']} ({cells[p]['gap']:+.2f})" for p in priors) + " |")
        lines.append("")
    def within(r: dict) -> bool:
        return abs(r["best_k"] - r["k_true"]) <= 0.3 * r["k_true"]
    lines += ["## Summary", "", "| corpus | K true | cells with the best K within ±30% of K true | largest best K |",
              "|---|---:|---:|---:|"]
    for name in dict.fromkeys(r["corpus"] for r in rows):
        mine = [r for r in rows if r["corpus"] == name]
        lines.append(f"| {name} | {mine[0]['k_true']} | {sum(map(within, mine))} of {len(mine)} "
                     f"| {max(r['best_k'] for r in mine)} |")
    settings = {}
    for r in rows:
        settings.setdefault((r["source"], r["dim"], r["prior"]), []).append(within(r))
    every = [f"{src} D {dim} {prior}" for (src, dim, prior), ok in settings.items() if all(ok)]
    lines += ["", f"Settings (features, D, prior) with the best K within ±30% on every corpus above: "
              f"{', '.join(every) if every else 'none'} (of {len(settings)}).", ""]
    return "\n".join(lines)


@cli_main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpora", nargs="+", default=list(CORPORA))
    ap.add_argument("--sources", nargs="+", choices=("pixels", "encoder"), default=["pixels", "encoder"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(REPO / "reports" / "deepdpm_prior_grid.md"))
    args = ap.parse_args(argv)
    missing = [c for c in args.corpora if not is_corpus(c)]
    if missing:
        raise UserError(f"dp_prior_grid: no corpus {', '.join(missing)} in data/corpora")
    # every setting of the row, class defaults filled in
    row = dict(get_clusterer("deepdpm", **run_config("deepdpm", load_params(REPO / "params.yaml"))[1]).params)
    if row["features"] != "pca" or row["umap_dim"]:
        raise UserError("dp_prior_grid: the deepdpm row no longer clusters PCA of the pixels; the grid's "
                        "'pixels' source is that row's codes")
    rows = []
    for name in args.corpora:
        t0 = time.time()
        rows += corpus_rows(name, row, args.seed, args.sources)
        print(f"{name}: {time.time() - t0:.0f} s", flush=True)
    command = "python scripts/dp_prior_grid.py" + "".join(
        f" --{k} {' '.join(getattr(args, k))}" for k in ("corpora", "sources") if getattr(args, k) != ap.get_default(k))
    text = render(rows, command, args.seed)
    atomic_write_text(Path(args.out), text)
    print(text.split("## Summary")[1].strip())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
