"""Classical baselines on pixels: k-means, Ward agglomerative, Dirichlet-process GMM.

All three share one feature step (``PixelClusterer.features``): pixel intensities in [0, 1],
flattened, optionally reduced by PCA (``pca_dim``; 0 = raw pixels). That feature matrix is
also the returned embedding, so the fixed-K protocol runs Ward on what the method saw.
The generic arithmetic is faiss (k-means) and scikit-learn (PCA, Ward, variational GMM).
"""
from __future__ import annotations

import time

import numpy as np

from signclust.data.corpus import Corpus
from signclust.data.glyphs import normalize_glyphs
from signclust.errors import UserError
from signclust.models.base import ClusterResult, FitContext, register
from signclust.models.baselines._nets import Baseline, faiss_kmeans, require_k
from signclust.models.params import Param


class PixelClusterer(Baseline):
    """Shared pixel -> (PCA) feature step; subclasses implement ``cluster``."""
    PARAMS = {
        "pca_dim": Param(50, int, min=0, doc="PCA components of the pixels (0: raw pixels)"),
        "glyphs": Param(False, bool, doc="cluster the normalised glyphs the LM clusterer starts from"),
    }

    def features(self, corpus: Corpus, seed: int) -> np.ndarray:
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
        x = self.features(corpus, ctx.seed)
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
    """Variational Dirichlet-process GMM (truncated stick-breaking, diagonal covariances by default):
    ``n_components`` is only an upper bound, the prior empties the components it does not need;
    the number of components that own tokens is the inferred K."""
    name = "dpgmm"
    needs_k = False
    # sklearn's variational DP collapses to 1-2 components on 50 PCA dims of digit-like
    # images (the Wishart prior's dof = n_dims pseudo-counts per component) and keeps
    # spurious components when dims approach n; 20 dims was the workable middle.
    # reports/dpgmm_k_sensitivity.md (scripts/dpgmm_k_sensitivity.py) measures K against PCA dims,
    # covariance model, truncation, variance floor and alpha on cypriot and Fashion-MNIST: no
    # setting gives K in band with a sensible V on both (the variational updates prune nothing
    # from a 400-component k-means start, or one broad component swallows most tokens).
    PARAMS = {**PixelClusterer.PARAMS,
              "pca_dim": Param(20, int, min=0, doc="PCA components of the pixels (0: raw pixels)"),
              "n_components": Param(400, int, min=1, doc="truncation level (upper bound on K)"),
              "covariance_type": Param("diag", str, choices=("diag", "full", "tied", "spherical"),
                                       doc="component covariances (sklearn's covariance_type)"),
              "weight_concentration": Param(None, float, gt=0, nullable=True,
                                            doc="DP alpha (null: 1 / n_components, sklearn's)"),
              "reg_covar": Param(1e-3, float, min=0,
                                 doc="added to the variances: keeps never-inked pixels from zero variance"),
              "max_iter": Param(300, int, min=1, doc="variational EM iterations"),
              "n_init": Param(1, int, min=1, doc="EM restarts"),
              "tol": Param(1e-3, float, min=0, doc="EM convergence threshold on the lower bound")}
    PRESETS = {"paper": {"pca_dim": 20, "n_components": 400, "max_iter": 1000, "n_init": 3}}

    def cluster(self, x, ctx):
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
