"""Why the DP methods' K misses the truth (issue 10): their own posteriors or their optimisers.

    .venv/bin/python scripts/dp_posterior.py                  # -> reports/deepdpm_posterior.md
    .venv/bin/python scripts/dp_posterior.py --method dpgmm   # -> reports/dpgmm_posterior.md
    .venv/bin/python scripts/dp_posterior.py --datasets mnist_test fashion_test --preset paper_umap \
        --subset 10000                    # -> reports/deepdpm_posterior_paper_umap_10000.md
    .venv/bin/python scripts/dp_posterior.py --features encoder   # -> reports/deepdpm_posterior_encoder.md

Both infer K by climbing log p(X, z) of a Dirichlet-process mixture of Gaussians: DeepDPM's
split/merge moves with full covariances under a Normal-inverse-Wishart prior (deepdpm.dp_log_joint:
the CRP probability of the partition plus each cluster's NIW marginal likelihood; a move's log
Hastings ratio is the change in it), the `dpgmm` row's merge moves with diagonal covariances under
a Normal-Gamma prior (dp_moves.log_joint). For each data set this script fits the method as the
pipeline configures it (seed 0: the train stage's settings on the corpora, paper_check's on its
benchmark sets, or with --preset the method's named parameter set there) and scores, on the
features that fit clustered and with its own prior: its labelling, k-means labellings of those
features at a grid of K and at the true K, and the true labelling. If the true labelling scores far
below the fit, no optimiser of this objective finds K near the truth on these features; if the fit
scores below a k-means labelling, the optimiser is what falls short. V is NMI (scikit-learn's,
arithmetic mean: the papers' metric). k-means at the true K on the same features says how far these
features separate the classes for a clusterer that is told K: a fit at or above it and far below a
paper's figure is short of the paper's features, not of its clustering. The labels are used only to
score: nothing is set from them (the true K only names one k-means row).

``--features encoder`` (corpora only) asks whether better features would give the DP methods K: the
method's own fit and prior, on the features of the contrastive glyph encoder that ``lm`` trains on a
noisy corpus (models/visual_encoder.py, lm's default epochs and strength; SimCLR, as the DeepDPM paper
clusters MoCo / SCAN features where an autoencoder does not separate the classes) instead of PCA of
the pixels, reduced to the same number of dimensions with the same transform.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from signclust.config import load_params  # noqa: E402
from signclust.data.corpus import Corpus, is_corpus_folder  # noqa: E402
from signclust.evaluation.metrics import score  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models.base import FitContext, get_clusterer  # noqa: E402
from signclust.models.baselines._nets import faiss_kmeans  # noqa: E402
from signclust.models.baselines import dp_moves  # noqa: E402
from signclust.models.baselines.deepdpm import NIWPrior, dp_log_joint  # noqa: E402
from signclust.data.glyphs import normalize_glyphs  # noqa: E402
from signclust.models.lm_clusterer import LMConfig  # noqa: E402
from signclust.models.visual_encoder import EncoderConfig, train_encoder  # noqa: E402
from signclust.models.train import run_config  # noqa: E402
from signclust.errors import UserError, cli_main  # noqa: E402
from signclust.reports.paper_check import check_data, check_params, check_setting, with_preset  # noqa: E402

CORPORA = ("cypriot", "lineara", "latin_hands")
K_GRID = (2, 4, 8, 16, 32, 64, 128, 256, 512)


def deepdpm_log_p(x: np.ndarray, p: dict):
    """z -> log p(X, z) of DeepDPM's model with its prior fitted to x as the fit does."""
    prior = NIWPrior.from_data(x, kappa=float(p["kappa"]), nu=p["nu"], psi_choice=p["psi_choice"],
                               psi_scale=float(p["psi_scale"]))
    return lambda z: dp_log_joint(x, z, prior, float(p["alpha"]))


def dpgmm_log_p(x: np.ndarray, p: dict):
    """z -> log p(X, z) (up to a constant of N) of the dpgmm row's merge-move model."""
    prior = dp_moves.NormalGammaPrior.from_data(x, dof=float(p["prior_dof"]))
    return lambda z: dp_moves.log_joint(x, z, prior, float(p["weight_concentration"]))


# per method: the train stage's features in words, and its log p(X, z) given (features, its params)
METHODS = {"deepdpm": ("PCA-10 of the pixels, one global scale", deepdpm_log_p),
           "dpgmm": ("PCA-20 of the pixels", dpgmm_log_p)}


def is_corpus(dataset: str) -> bool:
    return dataset in CORPORA or is_corpus_folder(REPO / "data" / "corpora" / dataset)


def encoder_features(corpus: Corpus, seed: int) -> np.ndarray:
    """(n_tokens, dim) float64: the contrastive glyph encoder's features of each token, trained as
    ``lm`` trains it on a noisy corpus before its pair rounds (LMConfig's epochs and strength)."""
    cfg = LMConfig()
    ecfg = EncoderConfig(cfg.encoder_epochs, cfg.encoder_strength, precision=cfg.encoder_precision)
    feats = train_encoder(normalize_glyphs(np.asarray(corpus.images)), ecfg, seed, "auto", cache=False)
    return feats[corpus.image_index()].astype(np.float64)


def reduced(f: np.ndarray, dim: int, seed: int) -> np.ndarray:
    from sklearn.decomposition import PCA
    return PCA(n_components=int(min(dim, *f.shape)), random_state=seed).fit_transform(f)


def on_encoder_features(clusterer, method: str, f: np.ndarray) -> None:
    """Make ``clusterer`` (its own fit, prior and inference) cluster ``f`` instead of its own features:
    PCA to its number of dimensions, then its own transform."""
    p = clusterer.params
    if method == "dpgmm":
        if p["features"] != "pixels":
            raise UserError(f"dp_posterior: --features encoder replaces dpgmm's pixel features, not {p['features']!r}")
        x = reduced(f, p["pca_dim"], 0).astype(np.float32)
        clusterer.features = lambda corpus, seed, ctx=None: x
        return
    if p["features"] != "pca" or p["umap_dim"] or p["transform"] not in ("none", "scale"):
        raise UserError("dp_posterior: --features encoder replaces deepdpm's PCA codes with transform none or "
                        f"scale, not features {p['features']!r}, umap_dim {p['umap_dim']}, transform {p['transform']!r}")
    z = reduced(f, p["feat_dim"], 0)
    if p["transform"] == "scale":                 # as DeepDPM.codes: one global scale
        z = (z - z.mean(axis=0)) / (z.std() + 1e-12)
    clusterer.codes = lambda corpus, ctx, *args, **kwargs: z


def paper_check_entry(params: dict, method: str, dataset: str, preset: str | None = None,
                      subset: int | None = None) -> dict:
    """The committed paper check of ``method`` on ``dataset``, as the stage runs it (full scale), or
    with the method's ``preset`` on ``subset`` images (paper_check.with_preset)."""
    check = next((c for c in params["paper_check"]["checks"] if c["method"] == method and c["dataset"] == dataset),
                 None)
    if check is None:
        raise UserError(f"dp_posterior: {dataset} is neither a corpus of data/corpora nor a data set "
                        f"the paper check fits {method} on")
    check = check_setting(check, params, "full")
    return check if preset is None else with_preset(check, preset, subset)


def method_config(params: dict, method: str, dataset: str, preset: str | None = None,
                  subset: int | None = None) -> tuple[dict, str]:
    """The settings the pipeline fits ``method`` with on ``dataset`` (the train stage's on a corpus,
    the paper check's on a benchmark set, or its ``preset`` on ``subset`` images), and their description."""
    if is_corpus(dataset):
        return run_config(method, params)[1], f"the train stage's (class defaults: {METHODS[method][0]})"
    check = paper_check_entry(params, method, dataset, preset, subset)
    return check_params(check, params), f"paper_check's ({check['setting']})"


def load(dataset: str, params: dict, method: str, preset: str | None = None, subset: int | None = None) -> Corpus:
    if is_corpus(dataset):
        return Corpus.load(REPO / "data" / "corpora" / dataset)
    return check_data(paper_check_entry(params, method, dataset, preset, subset))


def labellings(x: np.ndarray, gold: np.ndarray, fitted: np.ndarray, seed: int):
    """(name, labels): the fit's, one cluster, k-means of the features at each K of the grid and at
    the true K, the truth."""
    k_true = len(np.unique(gold))
    yield "the fit", fitted
    yield "one cluster", np.zeros(len(x), dtype=np.int64)
    for k in sorted({*K_GRID, k_true}):
        if k <= len(x) // 4:
            name = f"k-means K={k}" + (" (true K)" if k == k_true else "")
            yield name, faiss_kmeans(x.astype(np.float32), k, seed=seed, niter=50, nredo=3)[0]
    yield "true labels", gold


def default_datasets(params: dict, method: str) -> list[str]:
    """The corpora, then every benchmark set the paper check fits ``method`` on."""
    checks = params.get("paper_check", {}).get("checks", [])
    return [*CORPORA, *dict.fromkeys(c["dataset"] for c in checks if c["method"] == method)]


@cli_main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--method", choices=tuple(METHODS), default="deepdpm")
    ap.add_argument("--datasets", nargs="+", default=None,
                    help="default: the corpora and the method's paper-check data sets")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--preset", default=None,
                    help="benchmark sets only: fit with this named parameter set of the method (e.g. paper_umap)")
    ap.add_argument("--subset", type=int, default=None,
                    help="with --preset: this many images of each benchmark set (0: all; default: the check's)")
    ap.add_argument("--features", choices=("own", "encoder"), default="own",
                    help="corpora only: the method's own features, or the contrastive glyph encoder's (above)")
    ap.add_argument("--out", default=None,
                    help="default: reports/<method>_posterior[_<preset>[_<subset>]][_encoder].md")
    args = ap.parse_args(argv)
    if args.subset is not None and args.preset is None:
        raise UserError("dp_posterior: --subset goes with --preset")
    if args.features == "encoder" and args.preset is not None:
        raise UserError("dp_posterior: --features encoder is for the corpora, --preset for the benchmark sets")
    tag = "".join(f"_{p}" for p in (args.preset, args.subset) if p is not None)
    tag += "_encoder" if args.features == "encoder" else ""
    out = args.out or str(REPO / "reports" / f"{args.method}_posterior{tag}.md")
    params = load_params(REPO / "params.yaml")
    datasets = args.datasets or (CORPORA if args.features == "encoder" else default_datasets(params, args.method))
    if args.preset is not None and any(is_corpus(d) for d in datasets):
        raise UserError(f"dp_posterior: --preset is for the benchmark sets, not the corpora "
                        f"({', '.join(d for d in datasets if is_corpus(d))}); name them with --datasets")
    if args.features == "encoder" and not all(is_corpus(d) for d in datasets):
        raise UserError(f"dp_posterior: --features encoder is for the corpora, not "
                        f"{', '.join(d for d in datasets if not is_corpus(d))}")
    for dataset in datasets:                 # an unknown data set or preset: one error before any fit
        if not is_corpus(dataset):
            method_config(params, args.method, dataset, args.preset, args.subset)
    model = {"deepdpm": "each cluster's NIW marginal likelihood (full covariances), on the codes DeepDPM "
                        "clustered and with its own prior (`deepdpm.dp_log_joint`; the split/merge moves climb it)",
             "dpgmm": "each component's Normal-Gamma marginal likelihood (diagonal covariances; up to a "
                      "constant of N), on the features `dpgmm` clustered and with its own prior "
                      "(`dp_moves.log_joint`; the merge moves and sweeps climb it)"}[args.method]
    option = "" if args.method == "deepdpm" else f" --method {args.method}"
    if args.datasets:
        option += " --datasets " + " ".join(args.datasets)
    option += "".join(f" --{k} {v}" for k, v in (("preset", args.preset), ("subset", args.subset)) if v is not None)
    option += " --features encoder" if args.features == "encoder" else ""
    lines = [f"# {args.method}: its own posterior on each data set", "",
             f"Generated by `python scripts/dp_posterior.py{option}` (seed "
             f"{args.seed}). log p(X, z) = the CRP probability of the partition (alpha as configured) + "
             f"{model}. Higher is what the model "
             "prefers. *gap to best*: log p below the best labelling of the table, in nats per token.", ""]
    summary = [f"| data | K true | {args.method} K | best labelling by log p (K) "
               f"| true labels: gap to best, nats/token | {args.method} V (NMI) | k-means at the true K: V (NMI) |",
               "|---|---:|---:|---|---:|---:|---:|"]
    tables = []
    for dataset in datasets:
        corpus = load(dataset, params, args.method, args.preset, args.subset)
        cfg, what = method_config(params, args.method, dataset, args.preset, args.subset)
        gold = corpus.labels()
        k_true = corpus.counts()["types"]
        t0 = time.time()
        clusterer = get_clusterer(args.method, **cfg)
        where = ""
        if args.features == "encoder":
            on_encoder_features(clusterer, args.method, encoder_features(corpus, args.seed))
            where = (", on the contrastive glyph encoder's features (PCA to the same dimensions, the same "
                     "transform) instead of its own")
        result = clusterer.fit(corpus, FitContext(seed=args.seed, progress=False))
        x = np.asarray(result.embedding, dtype=np.float64)         # the features the fit clustered
        log_p = METHODS[args.method][1](x, clusterer.params)      # every setting, defaults filled in
        rows = []
        for name, z in labellings(x, gold, result.labels, args.seed):
            rows.append((name, int(len(np.unique(z))), log_p(z), float(score(gold, z)["v_measure"])))
        best = max(rows, key=lambda r: r[2])
        true = rows[-1]
        at_k = next(r for r in rows if r[0].endswith("(true K)"))
        summary.append(f"| {dataset} | {k_true} | {result.k_found} | {best[0]} ({best[1]}) "
                       f"| {(best[2] - true[2]) / len(x):.2f} | {rows[0][3]:.3f} | {at_k[3]:.3f} |")
        table = [f"## {dataset}", "",
                 f"{len(x)} tokens, K true {k_true}, D = {x.shape[1]}; {args.method} with {what} settings{where} "
                 f"(fit {time.time() - t0:.0f} s).", "",
                 "| labelling | K | log p(X, z) | gap to best (nats/token) | V |", "|---|---:|---:|---:|---:|"]
        for name, k, lp, v in rows:
            table.append(f"| {name} | {k} | {lp:.0f} | {(best[2] - lp) / len(x):.2f} | {v:.3f} |")
        tables += table + [""]
        print("\n".join(table), flush=True)
    atomic_write_text(Path(out), "\n".join(lines + summary + [""] + tables))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
