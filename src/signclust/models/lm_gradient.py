"""The gradient reading of seed 000 (SPEC §2): a free softmax table S, type embeddings E and an
LSTM language model trained by gradient descent on w_hom L_hom + w_lm L_LM + w_dup L_dup.

    p_i   = softmax(S[row(i)] / T)                  token i's distribution over s types
    x_t   = p_t @ E                                 soft type embedding fed to an LSTM over each text
    o_t   = head(LSTM(BOS, x_1 .. x_{t-1}))         logits for the type at position t
    L_LM  = CE(o_t, p_t)                            soft target: the next token's own distribution
    L_hom = sum_ij p_ij d(i, ex(j)) / norm          ex(j) = argmax_i p_ij, the exemplar of type j
    L_dup = sum_j max_{k>j} sim(ex(j), ex(k)) * mean_i p_ij
    L     = w_hom L_hom + w_lm (L_LM - alpha H(mean_i p_i)) + w_dup L_dup

This is no longer the shipped method (that is ``lm``, models/lm_clusterer.py, which optimises the
same three terms by discrete merge moves). It stays runnable as two rows of the tables:

- ``lm_seed`` (preset ``seed``): the plain reading of the seed — one free row of S per token, random
  init, 1/(s n) normalisation, a non-detached target, sim = 1 - d, no entropy counterweight. It
  collapses (RESEARCH_NOTES §1).
- ``lm_v1`` (this class's defaults): the first shipped default — rows of S tied per image, S started
  from a Ward cut of normalised glyphs at a fixed height (``init_threshold``), a detached target,
  an entropy counterweight and a kernel L_dup. Its measured numbers are in reports/comparison.md.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm import tqdm

from signclust.config import seed_everything, torch_device
from signclust.data.corpus import Corpus
from signclust.data.glyphs import normalize_glyphs
from signclust.distances.provider import DistanceProvider, OnDemandDistances
from signclust.errors import UserError
from signclust.models.base import ClusterResult, Clusterer, FitContext, register
from signclust.models.checkpoint import FitCheckpoint
from signclust.models.params import Param
from signclust.models.baselines._nets import faiss_kmeans


class TypeLM(nn.Module):
    """S (rows x s logits), E (s x d), and an LSTM language model over soft type embeddings."""

    def __init__(self, n_rows: int, s: int, d: int, hidden: int, layers: int, dropout: float):
        super().__init__()
        self.S = nn.Parameter(torch.zeros(n_rows, s))
        self.E = nn.Parameter(torch.randn(s, d) / math.sqrt(d))
        self.bos = nn.Parameter(torch.zeros(d))
        self.lstm = nn.LSTM(d, hidden, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, s)

    def probs(self, rows: torch.Tensor, temperature: float) -> torch.Tensor:
        return F.softmax(self.S[rows] / temperature, dim=-1)

    def next_type_logits(self, x: torch.Tensor, past_end: bool = False) -> torch.Tensor:
        """(B, L, d) soft type embeddings x_t = p_t @ E -> (B, L, s_out) logits predicting each
        position from the ones before it.

        past_end: also predict position L, one past the last column (the end-of-text class sits
        right after each text's last token, at L only for a text of full length): (B, L+1, s_out)
        logits, the LSTM fed BOS and all L tokens.
        """
        x = torch.cat([self.bos.expand(len(x), 1, -1), x if past_end else x[:, :-1]], dim=1)
        h, _ = self.lstm(self.drop(x))
        return self.head(self.drop(h))


# -- the three losses (pure functions: tested against hand-computed values) ------------------

def hom_loss(p: torch.Tensor, d_to_exemplars: torch.Tensor, norm: str) -> torch.Tensor:
    """sum_ij p_ij d(i, ex(j)), divided by s*n (the seed) or by n."""
    n, s = p.shape
    total = (p * d_to_exemplars).sum()
    return total / (s * n) if norm == "sn" else total / n


def lm_loss(logits: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the predicted type distribution against the soft target, mean over real positions."""
    log_p = F.log_softmax(logits, dim=-1)
    del logits              # the graph keeps log_p, not the logits: (B, L, s) less at the peak
    ce = -(target * log_p).sum(-1)
    return (ce * mask).sum() / mask.sum().clamp_min(1)


def dup_loss(p: torch.Tensor, exemplar_sim: torch.Tensor) -> torch.Tensor:
    """sum_j max_{k>j} sim(ex(j), ex(k)) * mean_i p_ij (the last type has no later type: 0)."""
    s = exemplar_sim.shape[0]
    later = torch.triu(torch.ones(s, s, dtype=torch.bool, device=exemplar_sim.device), diagonal=1)
    most_similar_later = exemplar_sim.masked_fill(~later, float("-inf")).max(dim=1).values
    most_similar_later = torch.where(torch.isinf(most_similar_later), torch.zeros_like(most_similar_later),
                                     most_similar_later)
    return (most_similar_later * p.mean(0)).sum()


def marginal_entropy(p: torch.Tensor) -> torch.Tensor:
    q = p.mean(0)
    return -(q * torch.log(q.clamp_min(1e-12))).sum()


def similarity(d: torch.Tensor, kind: str, scale: float) -> torch.Tensor:
    """Turn distances between exemplars into similarities; 'linear' is the seed's 1 - d."""
    if kind == "linear":
        return 1.0 - d
    if kind == "kernel":
        # d between unrelated glyphs sits in a narrow band (RESEARCH_NOTES §5); a kernel
        # scaled by the typical exemplar distance spreads duplicates from strangers
        return torch.exp(-(d / scale) ** 2)
    raise UserError(f"unknown dup_similarity '{kind}' (linear or kernel)")


# -- data helpers ---------------------------------------------------------------------------------

def padded_batches(texts: list[np.ndarray], batch_texts: int, order: np.ndarray):
    """Yield (token_ids (B, L) padded with -1, mask (B, L)) over texts in ``order``."""
    step = batch_texts if batch_texts > 0 else len(texts)
    for start in range(0, len(order), step):
        chosen = [texts[i] for i in order[start:start + step]]
        length = max(len(t) for t in chosen)
        ids = np.full((len(chosen), length), -1, dtype=np.int64)
        for row, t in enumerate(chosen):
            ids[row, :len(t)] = t
        yield torch.from_numpy(ids), torch.from_numpy(ids >= 0)


def pixel_features(corpus: Corpus, dim: int, seed: int, images: np.ndarray | None = None) -> np.ndarray:
    from sklearn.decomposition import PCA
    images = corpus.images if images is None else images
    x = images.reshape(len(images), -1).astype(np.float32) / 255.0
    dim = min(dim, len(x))                 # PCA needs at least as many images as components
    if dim and dim < x.shape[1]:
        sample = np.random.default_rng(seed).permutation(len(x))[:20000]
        x = PCA(dim, random_state=seed).fit(x[sample]).transform(x).astype(np.float32)
    return x[corpus.image_index()]


def kmeans_labels(x: np.ndarray, k: int, seed: int) -> np.ndarray:
    return faiss_kmeans(x, min(k, len(x)), seed=seed, niter=25)[0]


def visual_clusters(x: np.ndarray, k: int, method: str, seed: int, threshold: float = 0.0) -> np.ndarray:
    """A cheap visual clustering of tokens: Ward below 20k tokens, k-means above (or when asked).

    With ``threshold`` > 0 (Ward only) the tree is cut at that height instead of at k clusters,
    capped at k when k > 0: the number of types then comes from the data, not from the user.
    """
    if method == "ward" and len(x) <= 20000 and threshold > 0:
        from scipy.cluster.hierarchy import fcluster, ward
        tree = ward(x)
        labels = fcluster(tree, threshold, "distance")
        if k and len(np.unique(labels)) > k:
            labels = fcluster(tree, k, "maxclust")
        return np.unique(labels, return_inverse=True)[1]
    k = k or 500
    if method == "ward" and len(x) <= 20000:
        from sklearn.cluster import AgglomerativeClustering
        return AgglomerativeClustering(n_clusters=min(k, len(x)), linkage="ward").fit_predict(x)
    return kmeans_labels(x, k, seed)


@register
class GradientLMClusterer(Clusterer):
    name = "lm_gradient"
    needs_k = False

    P = Param
    PARAMS = {
        "s": P(0, int, min=2, also=(0,), doc="upper bound on types; 0: as many as the init_threshold cut gives "
                                            "(500 when it does not apply)"),
        "d": P(32, int, min=1, doc="type-embedding size"),
        "hidden": P(64, int, min=1, doc="LSTM hidden size"),
        "layers": P(1, int, min=1, doc="LSTM layers"),
        "dropout": P(0.3, float, min=0, lt=1, doc="an LM that generalises is what rewards merging (RESEARCH_NOTES §4)"),
        "w_hom": P(1.0, float, min=0, doc="weight of L_hom"),
        "w_lm": P(1.0, float, min=0, doc="weight of L_LM"),
        "w_dup": P(1.0, float, min=0, doc="weight of L_dup"),
        "hom_norm": P("n", str, choices=("n", "sn"), doc="seed: sn (1/(s n)) makes L_hom s times weaker than L_LM"),
        "detach_target": P(True, bool, doc="seed: false (the target is p itself, which then collapses)"),
        "entropy_alpha": P(0.9, float, min=0, doc="H(next|ctx) - alpha H(next) rewards merging free variants"),
        "dup_similarity": P("kernel", str, choices=("linear", "kernel"), doc="seed: linear (1 - d)"),
        "tie": P("image", str, choices=("token", "image", "micro"),
                 doc="rows of S shared by: token (seed) | image (identical images) | micro"),
        "micro_clusters": P(0, int, min=0, doc="with tie=micro: number of visual micro-clusters (0: 3 s)"),
        "init": P("ward", str, choices=("random", "kmeans", "ward"),
                  doc="random (seed) | kmeans | ward: S starts from a cheap visual clustering"),
        "init_scale": P(3.0, float, min=0, doc="logit given to the initial cluster"),
        "init_pca": P(50, int, min=0, doc="PCA components of the init features (0: pixels)"),
        "init_threshold": P(21.0, float, min=0, doc="Ward tree cut height (PCA-50 of the normalised glyphs); s = "
                                                   "the clusters found. Tuned on cypriot; does not transfer "
                                                   "(RESEARCH_NOTES §6)"),
        "max_len": P(32, int, min=0, doc="texts cut into windows of this many tokens for the LSTM (0: whole)"),
        "glyph_norm": P(True, bool, doc="seed: false. Init features from binarised, bounding-box-normalised glyphs"),
        "hom_distance": P("normalized", str, choices=("pixels", "normalized"),
                          doc="seed: pixels (mean |dpixel|); normalized: the same on the normalised glyphs"),
        "temperature": P(1.0, float, gt=0, doc="softmax temperature at the start"),
        "temperature_end": P(1.0, float, gt=0, doc="... annealed linearly to this"),
        "eos": P(True, bool, doc="predict an end-of-text type"),
        "epochs": P(40, int, min=0, doc="training epochs (0: the visual initialisation alone)"),
        "batch_texts": P(0, int, min=0, doc="texts per step; 0 = full batch"),
        "lr_s": P(0.05, float, gt=0, doc="Adam learning rate of S"),
        "lr": P(0.003, float, gt=0, doc="Adam learning rate of E, the LSTM and the head"),
        "exemplar_every": P(1, int, min=1, doc="steps between exemplar recomputations"),
        "cache_columns": P(4096, int, min=1, doc="on-demand distance columns kept (large corpora)"),
    }
    del P
    PRESETS = {
        # the plain reading of seed 000 (SPEC §2): kept runnable and in every table (row lm_seed)
        "seed": {"tie": "token", "init": "random", "hom_norm": "sn", "detach_target": False, "entropy_alpha": 0.0,
                 "dup_similarity": "linear", "dropout": 0.0, "eos": False, "glyph_norm": False,
                 "hom_distance": "pixels", "init_threshold": 0.0, "max_len": 0, "s": 100},
        # bigger corpora / a GPU
        "large": {"s": 500, "d": 64, "hidden": 256, "layers": 2, "epochs": 200, "batch_texts": 256},
    }
    fit_checkpoint = True

    # -- setup ------------------------------------------------------------------------------
    def _rows(self, corpus: Corpus, feats: np.ndarray | None, seed: int) -> np.ndarray:
        tie = self.params["tie"]
        if tie == "token":
            return np.arange(corpus.n_tokens)
        if tie == "image":
            return corpus.image_index()
        k = self.params["micro_clusters"] or 3 * (self.params["s"] or 500)
        return kmeans_labels(feats, k, seed)

    def _init_S(self, model: TypeLM, clusters: np.ndarray | None, gen: torch.Generator):
        p = self.params
        with torch.no_grad():
            if clusters is None:
                model.S.normal_(0, 1.0, generator=gen)
                return
            model.S.zero_()
            model.S[torch.arange(len(clusters)), torch.from_numpy(clusters)] = p["init_scale"]
            model.S.add_(0.01 * torch.randn(model.S.shape, generator=gen))

    # -- the objective of one step ---------------------------------------------------------
    def _loss_terms(self, model: TypeLM, p_all: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor,
                    d_cols: torch.Tensor, ex_sim: torch.Tensor) -> dict[str, torch.Tensor]:
        """w_hom L_hom + w_lm (L_LM - alpha H) + w_dup L_dup for one batch of texts, and its terms.

        p_all (n, s) is every token's type distribution, ids / mask (B, L) the batch's token ids
        (padded with -1), d_cols (n, s) the distances to the current exemplars, ex_sim (s, s).
        """
        p = self.params
        l_hom = hom_loss(p_all, d_cols, p["hom_norm"])
        l_dup = dup_loss(p_all, ex_sim)
        entropy = marginal_entropy(p_all)
        ids, keep = ids.clamp_min(0), mask[..., None]                  # padding: token 0, weight 0
        # x_t = p_t @ E, embedded before the gather: autograd saves no (B, L, s) copy of p
        x = (p_all @ model.E)[ids] * keep                                 # (B, L, d)
        with torch.set_grad_enabled(not p["detach_target"]):           # a detached target needs no graph
            target = p_all[ids] * keep                                   # (B, L, s)
        if p["eos"]:
            target, mask_lm = _with_eos(target, mask)                    # (B, L+1, s+1), (B, L+1)
        else:
            mask_lm = mask.float()
        l_lm = lm_loss(model.next_type_logits(x, past_end=p["eos"]), target, mask_lm)
        loss = p["w_hom"] * l_hom + p["w_lm"] * (l_lm - p["entropy_alpha"] * entropy) + p["w_dup"] * l_dup
        return {"loss": loss, "hom": l_hom, "lm": l_lm, "dup": l_dup, "entropy": entropy}

    # -- training ---------------------------------------------------------------------------
    def fit(self, corpus: Corpus, ctx: FitContext) -> ClusterResult:
        # checkpoints are keyed by the corpus content, the parameters, the seed and this code
        with FitCheckpoint.for_fit(self, corpus, ctx) as ckpt:
            return self._fit(corpus, ctx, ckpt)

    def _fit(self, corpus: Corpus, ctx: FitContext, ckpt: FitCheckpoint) -> ClusterResult:
        p = self.params
        seed_everything(ctx.seed)
        device = torch_device(ctx.device)
        gen = torch.Generator().manual_seed(ctx.seed)
        normed = normalize_glyphs(corpus.images) if (p["glyph_norm"] or p["hom_distance"] == "normalized") else None
        if p["hom_distance"] == "normalized":
            dist: DistanceProvider = OnDemandDistances(normed, corpus.image_index(), p["cache_columns"])
        else:
            dist = ctx.distances or OnDemandDistances(corpus.images, corpus.image_index(), p["cache_columns"])
        needs_feats = p["tie"] == "micro" or p["init"] != "random"
        feats = pixel_features(corpus, p["init_pca"], ctx.seed, normed if p["glyph_norm"] else None) \
            if needs_feats else None
        rows_np = self._rows(corpus, feats, ctx.seed)
        n_rows = int(rows_np.max()) + 1
        s = p["s"]
        init_clusters = None
        if p["init"] != "random":
            first_token = np.unique(rows_np, return_index=True)[1]   # a representative token per row
            init_clusters = visual_clusters(feats[first_token], s, p["init"], ctx.seed,
                                            p["init_threshold"] if p["init"] == "ward" else 0.0)
            if s == 0:
                s = int(init_clusters.max()) + 1
        elif s == 0:
            s = 500
        n_out = s + 1 if p["eos"] else s
        model = TypeLM(n_rows, s, p["d"], p["hidden"], p["layers"], p["dropout"])
        if p["eos"]:
            model.head = nn.Linear(p["hidden"], n_out)
        self._init_S(model, init_clusters, gen)
        model.to(device)
        rows = torch.from_numpy(np.array(rows_np, dtype=np.int64)).to(device)
        texts = [t for t in corpus.texts() if len(t) > 0]
        if p["max_len"] > 0:
            texts = [t[i:i + p["max_len"]] for t in texts for i in range(0, len(t), p["max_len"])]
        opt = torch.optim.Adam([
            {"params": [model.S], "lr": p["lr_s"]},
            {"params": [q for name, q in model.named_parameters() if name != "S"], "lr": p["lr"]},
        ])

        start_epoch, history = 0, []
        state = ckpt.load()            # weights-only; None unless a checkpoint of this very fit exists
        if state is not None:
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            start_epoch, history = state["epoch"], state["history"]

        n = corpus.n_tokens
        bar = tqdm(range(start_epoch, p["epochs"]), desc=f"lm seed{ctx.seed}", disable=not ctx.progress,
                   initial=start_epoch, total=p["epochs"])
        step = start_epoch * math.ceil(len(texts) / (p["batch_texts"] or len(texts)))
        exemplars, d_cols, ex_sim = None, None, None
        for epoch in bar:
            # each epoch's randomness derives from (seed, epoch): a resumed run replays it exactly
            torch.manual_seed(ctx.seed * 100003 + epoch)
            order = np.random.default_rng([ctx.seed, epoch]).permutation(len(texts))
            temperature = p["temperature"] + (p["temperature_end"] - p["temperature"]) * epoch / max(1, p["epochs"] - 1)
            model.train()
            sums = {"loss": 0.0, "hom": 0.0, "lm": 0.0, "dup": 0.0, "entropy": 0.0}
            batches = 0
            for ids, mask in padded_batches(texts, p["batch_texts"], order):
                ids, mask = ids.to(device), mask.to(device)
                p_all = model.probs(rows, temperature)                 # (n, s)
                if exemplars is None or step % p["exemplar_every"] == 0:
                    new_ex = p_all.detach().argmax(0).cpu().numpy()
                    if exemplars is None or not np.array_equal(new_ex, exemplars):
                        exemplars = new_ex
                        d_cols = torch.from_numpy(dist.columns(exemplars)).to(device)      # (n, s)
                        d_ex = d_cols[torch.from_numpy(exemplars).to(device)]              # (s, s)
                        scale = float(torch.median(d_ex[~torch.eye(s, dtype=torch.bool, device=device)]))
                        ex_sim = similarity(d_ex, p["dup_similarity"], max(scale, 1e-6))
                # the last step's gradients go before this step's forward, not after it
                opt.zero_grad()
                terms = self._loss_terms(model, p_all, ids, mask, d_cols, ex_sim)
                # only the graph holds the step's (n, s) tensors now: backward frees them as it
                # goes, and none lives on into the next step (each is 200 MB at 100k tokens, s = 500)
                del p_all
                terms["loss"].backward()
                opt.step()
                step += 1
                batches += 1
                for key, val in terms.items():
                    sums[key] += float(val.detach())
            with torch.no_grad():
                in_use = int(torch.unique(model.probs(rows, temperature).argmax(1)).numel())
            record = {k: v / batches for k, v in sums.items()} | {"types_in_use": in_use, "epoch": epoch + 1}
            history.append(record)
            bar.set_postfix(loss=f"{record['loss']:.3f}", hom=f"{record['hom']:.3f}", lm=f"{record['lm']:.2f}",
                            K=in_use)
            # saved before logging: a failing logger does not lose the epoch
            ckpt.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch + 1,
                       "history": history})
            if ctx.log_metrics:
                ctx.log_metrics({k: v for k, v in record.items() if k != "epoch"}, epoch + 1)
        bar.close()

        model.eval()
        with torch.no_grad():
            temperature = p["temperature_end"]
            p_final = model.probs(rows, temperature)
            labels = p_final.argmax(1).cpu().numpy()
            embedding = (p_final @ model.E).cpu().numpy()
        info = {"k_found": int(len(np.unique(labels))), "epochs": p["epochs"], "rows": n_rows,
                "history": history,
                "final": history[-1] if history else {}, "n_tokens": n}
        return ClusterResult(labels, embedding, info)


def _with_eos(target: torch.Tensor, mask: torch.Tensor):
    """Append an end-of-text class: the LM also learns where texts end."""
    b, length, s = target.shape
    out = torch.zeros(b, length + 1, s + 1, dtype=target.dtype, device=target.device)
    out[:, :length, :s] = target
    lengths = mask.sum(1)
    out[torch.arange(b), lengths, s] = 1.0
    new_mask = torch.zeros(b, length + 1, device=target.device)
    new_mask[:, :length] = mask.float()
    new_mask[torch.arange(b), lengths] = 1.0
    return out, new_mask

