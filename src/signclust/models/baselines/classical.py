"""Classical baselines on pixels: k-means, Ward agglomerative, Dirichlet-process GMM.

All three share one feature step (``PixelClusterer.features``): pixel intensities in [0, 1],
flattened, optionally reduced by PCA (``pca_dim``; 0 = raw pixels). That feature matrix is
also the returned embedding, so the fixed-K protocol runs Ward on what the method saw.
The generic arithmetic is faiss (k-means) and scikit-learn (PCA, Ward, variational GMM); the DP-GMM's
merge moves are `dp_moves.py`.
"""
from __future__ import annotations

import time

import numpy as np

from signclust.data.corpus import Corpus
from signclust.data.glyphs import normalize_glyphs
from signclust.errors import UserError
from signclust.models.base import ClusterResult, FitContext, register
from signclust.models.baselines._codes import CODE_PARAMS, ae_features, l2_rows, umap_embed
from signclust.models.baselines._nets import Baseline, faiss_kmeans, fit_setup, require_k
from signclust.models.params import Param


class PixelClusterer(Baseline):
    """Shared pixel -> (PCA) feature step; subclasses implement ``cluster``."""
    PARAMS = {
        "pca_dim": Param(50, int, min=0, doc="PCA components of the pixels (0: raw pixels)"),
        "glyphs": Param(False, bool, doc="cluster the normalised glyphs the LM clusterer starts from"),
    }

    def features(self, corpus: Corpus, seed: int, ctx: FitContext | None = None) -> np.ndarray:
        """(n_tokens, d) float32: what the method clusters (``ctx``: the fit's device and
        progress, for a subclass whose features are learned)."""
        # glyphs=True: the normalised glyphs our LM clusterer starts from, so the tables can
        # separate what the visual normalisation buys from what the LM adds
        images = normalize_glyphs(corpus.images) if self.p["glyphs"] else corpus.images
        images = images[corpus.image_index()]
        x = images.reshape(corpus.n_tokens, -1).astype(np.float32) / 255.0
        dim = int(self.p["pca_dim"])
        if dim == 0:
            return x
        from sklearn.decomposition import PCA
        dim = min(dim, x.shape[0], x.shape[1])
        # no whitening: k-means / Ward / GMM should see the pixel geometry, only compressed
        return PCA(n_components=dim, random_state=seed).fit_transform(x).astype(np.float32)

    def cluster(self, x: np.ndarray, ctx: FitContext) -> tuple[np.ndarray, dict]:
        raise NotImplementedError

    def fit(self, corpus: Corpus, ctx: FitContext) -> ClusterResult:
        t0 = time.time()
        x = self.features(corpus, ctx.seed, ctx)
        labels, info = self.cluster(x, ctx)
        info.update({"k_found": int(len(np.unique(labels))), "feature_dim": int(x.shape[1]),
                     "wall_s": time.time() - t0})
        return ClusterResult(labels, x, info)


@register
class KMeansPixels(PixelClusterer):
    name = "kmeans"
    needs_k = True
    PARAMS = {**PixelClusterer.PARAMS,
              "n_init": Param(10, int, min=1, doc="k-means restarts (the best objective is kept)"),
              "n_iter": Param(100, int, min=1, doc="k-means iterations per restart")}
    # textbook setting: raw pixels, best of 10 restarts (no paper; the usual reference run)
    PRESETS = {"paper": {"pca_dim": 0, "n_init": 10, "n_iter": 300}}

    def cluster(self, x, ctx):
        k = require_k(self.name, ctx)
        labels, _, obj = faiss_kmeans(x, k, seed=ctx.seed, niter=self.p["n_iter"],
                                      nredo=self.p["n_init"])
        return labels, {"inertia": obj}


@register
class WardPixels(PixelClusterer):
    name = "ward"
    needs_k = True
    PARAMS = dict(PixelClusterer.PARAMS)
    PRESETS = {"paper": {"pca_dim": 0}}

    def cluster(self, x, ctx):
        from sklearn.cluster import AgglomerativeClustering
        k = require_k(self.name, ctx)
        if k > len(x):
            raise UserError(f"ward: k={k} exceeds the number of tokens ({len(x)})")
        return AgglomerativeClustering(n_clusters=k, linkage="ward").fit_predict(x), {}


@register
class DPGMMPixels(PixelClusterer):
    """Dirichlet-process mixture of Gaussians on PCA of the pixels: K is inferred.

    ``inference: merge`` (default): k-means into ``n_components`` clusters, then merge moves and
    reassignment sweeps under scikit-learn's default conjugate prior (``dp_moves.py``: the
    hard-assignment form of memoized VB's merges, the DP-GMM of the DeepDPM paper's table).
    ``inference: vb``: scikit-learn's variational DP-GMM (truncated stick-breaking), which from
    its k-means start prunes almost no component; ``reports/dpgmm_k_sensitivity.md`` measures it.

    ``features: ae_umap`` clusters, instead of PCA of the pixels, an approximation of the features
    the DeepDPM paper gives every method of its Table 1 on MNIST / USPS / Fashion-MNIST
    (``_codes.py``: autoencoder codes -> UMAP -> L2 rows): the ``paper_umap`` preset, which the
    paper check runs to compare with the paper's moVB row. Not the default: on the sign corpora
    UMAP's clumps join signs and K falls far below the truth (README "Evaluation")."""
    name = "dpgmm"
    needs_k = False
    # PCA-20: sklearn's variational DP collapses to 1-2 components on 50 PCA dims of digit-like
    # images (the prior's dof = n_dims pseudo-counts per component); 20 dims was the workable middle.
    PARAMS = {**PixelClusterer.PARAMS,
              "pca_dim": Param(20, int, min=0, doc="PCA components of the pixels (0: raw pixels)"),
              "inference": Param("merge", str, choices=("merge", "vb"),
                                 doc="merge moves from k-means over-clustering, or sklearn's variational EM"),
              "n_components": Param(400, int, min=1,
                                    doc="k-means start (merge) / truncation level (vb): an upper bound on K"),
              "weight_concentration": Param(1.0, float, gt=0, doc="DP concentration alpha"),
              "prior_dof": Param(2.0, float, gt=0,
                                 doc="merge: pseudo-observations of each variance (dp_moves.py: why not D)"),
              "covariance_type": Param("diag", str, choices=("diag", "full", "tied", "spherical"),
                                       doc="vb: component covariances (sklearn's covariance_type); merge: diag"),
              "reg_covar": Param(1e-3, float, min=0,
                                 doc="vb: added to the variances (keeps never-inked pixels from zero variance)"),
              "max_iter": Param(300, int, min=1, doc="vb: EM iterations; merge: rounds of merges + sweeps"),
              "n_init": Param(1, int, min=1, doc="vb: EM restarts"),
              "tol": Param(1e-3, float, min=0, doc="vb: EM convergence threshold on the lower bound"),
              "features": Param("pixels", str, choices=("pixels", "ae_umap"),
                                doc="pixels: PCA of the pixels (pca_dim) | ae_umap: the DeepDPM paper's "
                                    "features, autoencoder codes -> UMAP -> L2 rows (_codes.py)"),
              **CODE_PARAMS,
              "umap_dim": Param(10, int, min=1, doc="ae_umap: UMAP dimensions (the authors' 10)"),
              "ae_batch_size": Param(128, int, min=1, doc="ae_umap: autoencoder images per step")}
    PRESETS = {"paper": {"pca_dim": 20, "n_components": 400, "max_iter": 1000, "n_init": 3}}
    # the paper's DP-GMM row (moVB in DeepDPM's Table 1) ran on the N2D features of that table
    PRESETS["paper_umap"] = {**PRESETS["paper"], "features": "ae_umap"}

    def validate(self):
        if self.p["features"] == "ae_umap" and self.p["glyphs"]:
            raise UserError("dpgmm: glyphs: true is a choice of the pixel features; features 'ae_umap' "
                            "learns its own from the images (set glyphs: false or features: pixels)")

    def features(self, corpus, seed, ctx=None):
        if self.p["features"] == "pixels":
            return super().features(corpus, seed, ctx)
        # one seed for the autoencoder and UMAP; a direct call (no fit context) runs quietly
        ctx = FitContext(seed=seed, device=ctx.device if ctx else "auto", progress=bool(ctx and ctx.progress))
        device, gen = fit_setup(ctx)
        p = self.p
        z = ae_features(corpus.token_images(), p["feat_dim"], p["ae_width"], p["ae_epochs"], p["ae_lr"], p["ae_batch_size"],
                        device, gen, ctx.progress, name=self.name)
        z = umap_embed(z, p["umap_dim"], p["umap_neighbors"], p["umap_min_dist"], seed, name=self.name,
                       without="features: pixels")
        return l2_rows(z).astype(np.float32)

    def cluster(self, x, ctx):
        if self.p["inference"] == "merge":
            if self.p["covariance_type"] != "diag":
                raise UserError("dpgmm: inference 'merge' models diagonal covariances only "
                                f"(covariance_type {self.p['covariance_type']!r} needs inference 'vb')")
            from signclust.models.baselines.dp_moves import fit_dp_merge
            labels, info = fit_dp_merge(x, self.p["n_components"], self.p["weight_concentration"],
                                        ctx.seed, rounds=self.p["max_iter"], dof=self.p["prior_dof"])
            k_path = [k for k, _ in info["history"]]
            return labels, {"k_start": k_path[0], "k_per_round": k_path,
                            "log_joint": info["history"][-1][1], "rounds": len(k_path) - 1}
        return self._cluster_vb(x, ctx)

    def _cluster_vb(self, x, ctx):
        from sklearn.mixture import BayesianGaussianMixture
        p = self.p
        gmm = BayesianGaussianMixture(
            n_components=int(min(p["n_components"], len(x))), covariance_type=p["covariance_type"],
            weight_concentration_prior_type="dirichlet_process",
            weight_concentration_prior=p["weight_concentration"], reg_covar=p["reg_covar"],
            max_iter=p["max_iter"], n_init=p["n_init"], tol=p["tol"], random_state=ctx.seed)
        import warnings
        from sklearn.exceptions import ConvergenceWarning
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            labels = gmm.fit_predict(x)
        # the predicted components are arbitrary indices into the truncation; renumber 0..K-1
        labels = np.unique(labels, return_inverse=True)[1]
        return labels, {"converged": bool(gmm.converged_), "n_iter": int(gmm.n_iter_),
                        # sklearn 1.9 gives the tied model's bound as shape (1,), the others' as ()
                        "lower_bound": float(np.asarray(gmm.lower_bound_).reshape(-1)[0]),
                        "n_convergence_warnings": len(caught),
                        "effective_components": int((gmm.weights_ > 1.0 / len(x)).sum())}
