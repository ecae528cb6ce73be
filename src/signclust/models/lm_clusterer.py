"""The LM sign clusterer (seed 000, SPEC §2), optimised by merge moves.

A *state* is a partition of the n tokens into types z_1..z_n. Seed 000 scores a state with three
terms; we keep the three and read each as a log-likelihood ratio in nats, so that no weight has
to be tuned against the scale or style of the images:

    L_LM   how well the types predict their neighbours: the Dirichlet-multinomial marginal
           likelihood of each type's left and right neighbour types (a class bigram language model
           read in both directions; its marginal likelihood is its prequential, i.e. held-out,
           cross-entropy). Merging two types whose tokens occur in the same contexts pools their
           counts and raises it (the allographs of a sign in free variation); merging types whose
           contexts differ lowers it.
    L_hom  how alike the tokens of a type look: the log-odds that two clusters show the same sign,
           from a pair model fitted on the corpus itself (below).
    L_dup  the seed's duplicate term: a type whose nearest visual neighbour is another type is a
           candidate duplicate; here it is the prior of a merge, decreasing in the visual rank of
           the partner, and the floor of L_hom: no visual evidence is stronger than the odds of
           picking one type out of K.

    merge gain(u, v) = w_lm dL_LM(u, v) + max(w_hom lo(d_min(u, v)) - link_c0, w_dup prior(u, v))
                       + w_hom S(u, v)

where lo(d) = a - b d is the pair model's log-odds, d_min(u, v) the closest token pair of the two
types on a token kNN graph, and S(u, v) the sum of lo over the pairs of their tokens that share a
text (one hand: like compared with like), each text's sum divided by the larger of the two types'
counts in it (``same_text``: a token's pairs with the copies of one sign in its text are one
comparison, not many). A clean corpus has no pair model: its visual term is the
prior plus ``match_bonus`` for mutually nearest types that pass a ratio test.
The max also holds the prior plus w_hom ``knn_vote``(u, v) (``vote``, default near): where the kNN
edges of the smaller type's tokens land, against where other tokens near the larger type send theirs.

A sign written by several hands (one hand per text) splits into one fragment per hand, and so do
its neighbours: contexts over the current types cannot join the fragments, since each fragment's
neighbours are that hand's fragments. On a noisy corpus dL_LM is therefore also read over a few
hand-invariant context symbols (a Ward cut into ``coarse_contexts`` clusters), and a pair takes the
larger of the two readings when its types avoid each other's texts (``avoidance``: log P under a
Poisson spread over texts below ``-avoid_c0`` nats) -- the complementary distribution that marks
the forms of one sign by different hands. Pairs that share texts keep the current-type contexts.

``cluster`` starts from visual micro-clusters and merges greedily (the best disjoint pairs first,
a few per cent of the types per round) while the gain is positive. K, the number of types, is
where that stops (or, on a noisy corpus, an earlier state of the merges; below): it is never given
and no distance threshold is set by hand.

When a noisy corpus's texts fall into two styles (a cursive hand beside print hands), a sign can keep
one type per style even so: the coarse symbols of its neighbours differ by style too. After the fit,
``style_alignment`` reads the minor style's own types as a substitution cipher of the major style's
(an HMM over the major style's type bigrams, emissions by EM) and joins each type to its decoding
(models/style_alignment.py).

On a clean corpus a sign seen a few times has its typeface forms in too few contexts for dL_LM to
join them. ``join_forms`` then makes one more pass: the types the merges joined (frequent signs,
joined by context) show what a typeface changes, a two-covariance model of the forms
(``TwoCovariance``) scores whether two types show one sign, and no type takes more forms than a
frequent sign shows (``form_capacity``), and a join also gains how much likelier the two types' counts
of forms are as one sign's than as two (``FormOccupancy``: in free variation a frequent type showing fewer
forms than a sign has is unlikely to be a whole sign); see ``LMSignClusterer._join_forms``. Its joins change the
contexts the merges read, so the merges run again (within the capacity) and the two passes take
turns until neither moves a type. Each turn starts with form moves (``form_move_gains``): a form
that the merges put into another sign's type (a look-alike) goes to its own sign's type where the
same objective gains, counting the join the move frees -- a type at capacity that held the stray
can take its sign's missing form. A type still over the capacity holds two signs with nowhere else
to go, and splits where its best bipartition gains (``split_gains``).

On a noisy corpus the pair model (below) is fitted on the pairs that pass a ratio test, and how
strict that test is sets how fine the micro-clusters are and how much a close pair counts: an
alphabet, whose signs recur in every text, wants a loose test; a script of hundreds of signs,
where a token's nearest neighbour in its text is often another sign, a strict one. ``fit`` makes
one fit per ratio in ``pair_ratios`` and keeps the one whose types best predict their neighbours'
hand-invariant symbols (``neighbour_evidence``: L_LM over symbols that stay fixed, so fits with
different K are scored on the same data). The same score says where a candidate's merges stop
(``path_evidence``): every state of its merge path is scored, and the best is kept where it beats
the end by more than ``path_margin`` nats -- the pair terms can keep gaining where the types have
stopped predicting their neighbours (a script of hundreds of rare signs, whose visually nearest
types are other signs).

The merges only join, so a type that holds two signs (joined by the micro-clusters, or by a merge
on flat evidence) stays one. ``splits`` makes one pass of split moves after the fit
(``split_types``): each type is cut in two by 2-means of its features, and the cut is kept where
the halves predict their neighbours' symbols better apart, by more than ``split_margin`` nats of
``neighbour_evidence``; where that gain is not chance (its p-value against random cuts of the type
into parts of the same sizes passes Benjamini-Hochberg at ``split_fdr`` over the types tried: the
Dirichlet prior is weak, and a type of one sign cut at random often gains the margin); and where the
halves share texts (two signs of one hand; halves that keep to different texts are one sign's
hands, whose neighbours differ by hand too).

The visual side, all label-free and fitted per corpus:
- a noisy corpus's images first lose their writer's slant (``text_deslant``): a writer leans every
  sign of a text alike, so the median of the tokens' moment slants over a text, less the corpus's
  median, is the hand's lean, and every token of the text is sheared upright by it (shrunk for short
  texts), the slant correction handwriting recognisers start with.
- features: normalised glyphs (ink, position, size removed) and their stroke skeletons
  (stroke width removed), PCA to ``feature_dim``. On a noisy corpus they sit, weighted by
  ``glyph_weight``, beside the features of a contrastive encoder trained on the corpus's own
  glyphs (models/visual_encoder.py: SimCLR with small elastic and affine deformations), which
  see past the pen: one sign's forms by two hands are often further apart in pixels than two
  signs by one hand. The encoder then trains ``encoder_pair_rounds`` rounds on pairs mined from
  the features so far: within one text, mutual nearest neighbours that pass the ratio test, i.e.
  two writings of one sign by one hand, the corpus's own variation, which the encoder's
  deformations do not model. With ``self_rounds`` (default 1), the fit is then made again after
  each further round on pairs of tokens of one fitted type, any two texts (self-training: the
  fragments that context joined across hands teach the encoder what one sign's forms share).
  Then each token minus its text's mean feature, shrunk by
  n_t / (n_t + text_centring): a hand is a per-text offset in this space.
- pair model: within one text (one hand), a token's nearest neighbour that is much nearer than
  its second nearest is almost always the same sign (measured 0.73-0.98 precision on the suite);
  a logistic fit of those pairs against all within-text pairs gives the log-odds a - b d that
  two tokens at distance d show the same sign. A corpus whose sign images recur exactly (a clean
  corpus: fewer distinct images than ``clean_share`` x tokens) has no within-sign variation to
  learn from; there the micro-clusters are the distinct images and the visual term is the rank
  prior alone.
- micro-clusters of a noisy corpus: average linkage cut where the pair model's odds are even.

``embedding_`` (what the fixed-K protocol clusters) is the text-centred feature of each token
followed by its type's context profile. Measured numbers are in reports/suite.md and
reports/comparison.md, not here.
"""
from __future__ import annotations

import dataclasses
import itertools
import time
from dataclasses import dataclass
from functools import partial

import numpy as np
from scipy import sparse
from scipy.special import gammaln

from signclust.data.corpus import Corpus
from signclust.data.glyphs import normalize_glyphs, skeleton_glyphs
from signclust.data.slant import moment_slants, shear_glyphs
from signclust.errors import UserError
from signclust.models.base import ClusterResult, Clusterer, FitContext, register
from signclust.models.merging import apply_merges, disjoint_best
from signclust.models.params import config_field, params_of


# the kNN votes ``knn_vote`` reads (``vote: none`` reads none)
KNN_VOTE_MODES = ("token", "edge", "near", "near_loose")


@dataclass
class LMConfig:
    # visual features
    feature_dim: int = config_field(32, int, min=1, doc="PCA components of [normalised glyph, skeleton]")
    skeleton: bool = config_field(True, bool, doc="add the stroke skeleton (stroke-width invariant)")
    text_centring: float = config_field(8.0, float, min=0, doc="shrinkage of the per-text offset removal (0: off)")
    text_deslant: float = config_field(8.0, float, min=0,
                                       doc="noisy corpus: shear every token upright by its text's slant (the median "
                                           "moment slant of the text's tokens less the corpus's), shrunk by "
                                           "n_t / (n_t + text_deslant) (0: off)")
    encoder_epochs: int = config_field(20, int, min=0,
                                       doc="noisy corpus: epochs of the contrastive glyph encoder (0: no encoder)")
    encoder_strength: float = config_field(0.5, float, min=0,
                                           doc="deformation scale of the encoder's views (1: the usual glyph augmentation)")
    glyph_weight: float = config_field(0.5, float, min=0,
                                       doc="with the encoder: weight of the glyph features beside its features")
    encoder_precision: str = config_field("auto", str, choices=("auto", "bf16", "fp32"),
                                          doc="the encoder's training passes: bf16 (mixed precision), fp32, or auto "
                                              "(bf16 where the device has it in hardware, else fp32)")
    encoder_pair_rounds: int = config_field(2, int, min=0,
                                            doc="noisy corpus: rounds of encoder training on mined pairs (within-text "
                                                "mutual nearest neighbours, mined again each round; 0: none)")
    encoder_pair_epochs: int = config_field(30, int, min=1, doc="epochs of each round of mined pairs")
    encoder_pair_ratio: float = config_field(0.8, float, gt=0, max=1,
                                             doc="the ratio test of the mined pairs (as pair_ratios)")
    self_rounds: int = config_field(1, int, min=0,
                                    doc="noisy corpus: rounds of self-training after the fit: the encoder trains "
                                        "encoder_pair_epochs more on pairs of tokens of one fitted type (any two "
                                        "texts), then the fit is made again (0: none; README 'The LM sign clusterer')")
    self_pairs: int = config_field(1000, int, min=1,
                                   doc="at most this many pairs in a round of self-training (a random subset)")
    # micro-clusters and the pair model
    clean_share: float = config_field(0.5, float, gt=0, max=1,
                                      doc="distinct images / tokens at or below this: a clean corpus")
    pair_ratios: list = config_field([0.7, 0.8, 0.9, 1.0], list, item=float, gt=0, max=1,
                                     doc="noisy corpus: one fit per ratio test (a within-text nearest neighbour this "
                                         "much nearer than the 2nd is a pair); the selection keeps one")
    select_symbols: int = config_field(10, int, min=1,
                                       doc="noisy corpus: the selection's neighbour symbols (a Ward cut into this many)")
    select_beta: float = config_field(1.0, float, gt=0,
                                      doc="the selection's Dirichlet concentration per neighbour symbol")
    max_linkage_tokens: int = config_field(20000, int, min=2,
                                           doc="above this, micro-clusters come from k-means (tokens / 8)")
    max_types: int = config_field(4000, int, min=2,
                                  doc="at most this many micro-clusters: the merge loop holds a few (K, K) arrays")
    # the three terms of the merge gain
    w_lm: float = config_field(1.0, float, min=0, doc="weight of dL_LM (context)")
    w_hom: float = config_field(1.0, float, min=0, doc="weight of dL_hom (visual pair evidence)")
    w_dup: float = config_field(1.0, float, min=0, doc="weight of the duplicate/rank prior")
    context_beta: float = config_field(0.1, float, gt=0, doc="Dirichlet concentration per context type")
    coarse_contexts: int = config_field(10, int, min=0,
                                        doc="noisy corpus: context symbols of a Ward cut into this many (0: off)")
    avoid_c0: float = config_field(6.0, float, min=0,
                                   doc="nats of avoidance over texts before a pair may use the coarse contexts")
    rank_c0: float = config_field(2.0, float, min=0, doc="prior log-odds against merging with the nearest type")
    link_c0: float = config_field(2.0, float, min=0,
                                  doc="prior log-odds against a merge supported by one close token pair")
    vote: str = config_field("near", str, choices=("none",) + KNN_VOTE_MODES,
                             doc="noisy corpus: kNN-vote evidence for a small type joining a larger one "
                                 "(near: every kNN edge, against the tokens near the larger type; "
                                 "near_loose: near times 1 - the small type's cohesion, none for a type whose "
                                 "tokens fill their kNN slots with each other; "
                                 "token, edge: against the whole graph, each token once or every edge; "
                                 "none: no vote, `off` in the reports made before the name changed; "
                                 "reports/knn_vote_study_near.md, reports/knn_vote_study.md)")
    seat_odds: bool = config_field(False, bool,
                                   doc="noisy corpus: a one-token type joining a type of n tokens gains the Chinese "
                                       "restaurant process's odds log(n / alpha) of that table over a new one "
                                       "(alpha: the Ewens estimate from the current K)")
    same_text: str = config_field("tokens", str, choices=("pairs", "tokens"),
                                  doc="noisy corpus: how the same-text pair evidence S(u, v) counts (tokens: each "
                                      "token of the smaller type once per text; pairs: every pair of tokens, the "
                                      "default before; reports/same_text_study.md)")
    match_ratio: float = config_field(0.7, float, gt=0, max=1,
                                      doc="clean corpus: mutual nearest types this much nearer than the next")
    match_bonus: float = config_field(3.0, float, min=0, doc="clean corpus: nats of a visual match")
    join_forms: bool = config_field(True, bool,
                                    doc="clean corpus: after the merges, join the types that are forms of one sign "
                                        "(a two-covariance model of the forms the merges joined; at most as many "
                                        "forms a type as a frequent sign shows; README 'The LM sign clusterer')")
    form_shrink: float = config_field(0.3, float, min=0, max=1,
                                      doc="join_forms: shrinkage of the within-sign covariance towards its diagonal "
                                          "(0.1 before; reports/form_join_study.md)")
    form_occupancy: bool = config_field(True, bool,
                                        doc="join_forms: a join also gains how much likelier the two types' counts of "
                                            "forms are as one sign's than as two, if each sign shows its forms in free "
                                            "variation (FormOccupancy; false: the default before; "
                                            "reports/form_join_study.md)")
    # the merge loop
    candidates: int = config_field(10, int, min=1, doc="partners per type (visual and context neighbours)")
    batch: float = config_field(0.05, float, gt=0, max=1, doc="at most this share of the types merges per round")
    max_rounds: int = config_field(1000, int, min=0, doc="merge rounds (0: the micro-clusters alone)")
    path_evidence: bool = config_field(True, bool,
                                       doc="noisy corpus: score every state of the merge path by neighbour_evidence and "
                                           "keep the best one where it beats the path's end by more than path_margin "
                                           "(the merges then stop where the types stop predicting their neighbours; "
                                           "false: the end, the default before; reports/path_evidence_study.md)")
    path_margin: float = config_field(10.0, float, min=0,
                                      doc="path_evidence: nats an earlier state must gain over the path's end")
    refits: int = config_field(0, int, min=0, doc="refit the pair model on within-text pairs of the types found, "
                               "then merge again (opt-in: fewer types, mixed V; README 'Methods')")
    # after the fit
    style_alignment: bool = config_field(True, bool,
                                         doc="noisy corpus: where the texts fall into two styles whose forms of a sign "
                                             "are two types, read the minor style's own types as a substitution "
                                             "cipher of the major style's and join each to its decoding "
                                             "(models/style_alignment.py; reports/style_alignment_study.md)")
    style_p_min: float = config_field(0.5, float, gt=0, max=1,
                                      doc="style_alignment: the share of a type's posterior mass its decoding must hold")
    splits: bool = config_field(True, bool,
                                doc="noisy corpus: after the fit, cut each type of at least 4 tokens in two (2-means "
                                    "of its features) where the halves predict their neighbours' symbols better apart "
                                    "(neighbour_evidence gains more than split_margin nats, and more than random cuts "
                                    "do: split_fdr) and share texts (avoidance above -split_avoid: halves that keep to "
                                    "different texts are one sign's hands); one pass (false: the default before; "
                                    "README 'The LM sign clusterer')")
    split_margin: float = config_field(2.0, float, min=0, doc="splits: nats of neighbour_evidence a split must gain")
    split_fdr: float = config_field(0.01, float, gt=0, max=1,
                                    doc="splits: false discovery rate of the cuts (Benjamini-Hochberg over the types "
                                        "tried, each cut's p-value against 999 random cuts of the same sizes)")
    split_avoid: float = config_field(2.0, float, min=0,
                                      doc="splits: nats of avoidance over texts past which the halves are hands, "
                                          "not signs")


# --------------------------------------------------------------------------- visual side
def glyph_blocks(images: np.ndarray, skeleton: bool) -> list[np.ndarray]:
    """uint8 (m, H, W) -> the feature blocks as computed, (m, pixels) each: the normalised glyph
    (uint8), then (with ``skeleton``) the stroke skeleton (float32 in [0, 1])."""
    blocks = [normalize_glyphs(images).reshape(len(images), -1)]
    if skeleton:
        blocks.append(skeleton_glyphs(images).reshape(len(images), -1))
    return blocks


def as_float(blocks: list[np.ndarray]) -> list[np.ndarray]:
    """The blocks as float32 in [0, 1] (the glyph block is stored as uint8)."""
    return [blocks[0].astype(np.float32) / 255.0] + blocks[1:]


def unit_variance(block: np.ndarray) -> np.ndarray:
    """(m, d) -> the block scaled to unit total variance, so that blocks of different sizes and
    units weigh alike when concatenated."""
    return block / np.sqrt(max(float(block.var(0).sum()), 1e-12))


def glyph_features(images: np.ndarray, cfg: LMConfig, seed: int, chunk: int = 20000,
                   pca_sample: int = 20000) -> np.ndarray:
    """uint8 (m, H, W) distinct images -> float32 (m, feature_dim): PCA of [glyph, skeleton],
    each block scaled to unit total variance so that neither dominates; the PCA is fitted on at
    most ``pca_sample`` images (a random sample).

    Up to ``chunk`` images everything is built at once. Beyond, the float32 blocks and their
    scaled copy would hold several GB (4.6 GB peak at 100k images), so the blocks are kept as
    computed (uint8 glyphs, float32 skeletons: 0.5 GB at 100k) and widened, scaled and projected
    ``chunk`` images at a time; the variances are accumulated in float64."""
    from sklearn.decomposition import PCA
    m = len(images)
    sample = np.random.default_rng(seed).permutation(m)[:pca_sample]
    if m <= chunk:
        blocks = as_float(glyph_blocks(images, cfg.skeleton))
        x = np.concatenate([unit_variance(b) for b in blocks], axis=1)
        dim = int(min(cfg.feature_dim, m - 1, x.shape[1]))
        if dim < 1:
            return np.zeros((m, 1), dtype=np.float32)
        return PCA(dim, random_state=seed).fit(x[sample]).transform(x).astype(np.float32)
    spans = [(a, min(a + chunk, m)) for a in range(0, m, chunk)]
    raw = [np.concatenate(parts) for parts in zip(*(glyph_blocks(images[a:b], cfg.skeleton) for a, b in spans))]
    s1 = [np.zeros(r.shape[1]) for r in raw]
    s2 = [np.zeros(r.shape[1]) for r in raw]
    for a, b in spans:                          # per block: sum and sum of squares over all images
        for i, blk in enumerate(as_float([r[a:b] for r in raw])):
            s1[i] += blk.sum(0, dtype=np.float64)
            s2[i] += (blk.astype(np.float64) ** 2).sum(0)
    scale = [1.0 / np.sqrt(max(float((q / m - (p / m) ** 2).sum()), 1e-12)) for p, q in zip(s1, s2)]

    def scaled(idx) -> np.ndarray:
        return np.concatenate([blk * np.float32(c) for blk, c in zip(as_float([r[idx] for r in raw]), scale)], axis=1)

    pca = PCA(int(min(cfg.feature_dim, sum(r.shape[1] for r in raw))), random_state=seed).fit(scaled(np.sort(sample)))
    return np.concatenate([pca.transform(scaled(slice(a, b))) for a, b in spans]).astype(np.float32)


def with_encoder(feats: np.ndarray, images: np.ndarray, cfg: LMConfig, ctx: FitContext,
                 tokens: tuple | None = None, fitted: tuple = ()) -> np.ndarray:
    """(m, D) glyph features of the distinct images -> (m, D + 64): the glyph features x
    ``glyph_weight`` beside the contrastive encoder's features (models/visual_encoder.py), each
    block first scaled to unit total variance. The encoder's features see past the hand; the
    glyph features keep the one-stroke differences of a large inventory that its deformations
    blur.

    With ``encoder_pair_rounds`` and ``tokens`` = (image_index, texts, text_index), the encoder then
    goes on training, round by round, on pairs of images mined from the features so far
    (``mined_pairs``: within one text, one hand, mutual nearest neighbours that pass the ratio
    test): two writings of one sign by one hand, the variation a handwriting corpus adds to every
    token and the encoder's own deformations do not model.

    ``fitted``: labellings of the tokens by earlier fits (``self_rounds``); after the mined rounds, one
    round per labelling on pairs of tokens of one type (``type_pairs``), whatever their texts: the
    types that context and the merges joined across hands become the variation to ignore."""
    from signclust.models.visual_encoder import EncoderConfig, train_encoder
    glyphs = normalize_glyphs(images)
    ecfg = EncoderConfig(cfg.encoder_epochs, cfg.encoder_strength, pair_epochs=cfg.encoder_pair_epochs,
                         precision=cfg.encoder_precision)

    def joined(enc: np.ndarray) -> np.ndarray:
        return np.concatenate([cfg.glyph_weight * unit_variance(feats), unit_variance(enc)], axis=1).astype(np.float32)
    x = joined(train_encoder(glyphs, ecfg, ctx.seed, ctx.device, ctx.progress))
    rounds = []
    for _ in range(cfg.encoder_pair_rounds if tokens is not None else 0):
        image_index, texts, text_index = tokens
        pairs = mined_pairs(text_centre(x[image_index], text_index, cfg.text_centring), texts, image_index,
                            cfg.encoder_pair_ratio)
        if len(pairs[0]) < 8:                   # not one batch of pairs: nothing to learn from
            break
        rounds.append(pairs)
        x = joined(train_encoder(glyphs, ecfg, ctx.seed, ctx.device, ctx.progress, pairs=rounds))
    for i, z in enumerate(fitted if tokens is not None else ()):
        pairs = type_pairs(z, tokens[0], np.random.default_rng([ctx.seed, i]), cfg.self_pairs)
        if len(pairs[0]) < 8:                   # types of one image each: nothing to learn from
            break
        rounds.append(pairs)
        x = joined(train_encoder(glyphs, ecfg, ctx.seed, ctx.device, ctx.progress, pairs=rounds))
    return x


def type_pairs(z: np.ndarray, image_index: np.ndarray, rng: np.random.Generator,
               at_most: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(a, b): the distinct images of pairs of tokens of one type of the labelling z (n,): each token
    of a type of two or more with a random token of its type (a permutation within the type), pairs
    of one image twice left out; then ``at_most`` of them, a random subset in their order."""
    order = np.argsort(z, kind="stable")                            # the tokens grouped by type
    starts = np.r_[0, np.flatnonzero(np.diff(z[order])) + 1, len(z)]
    partner = order.copy()
    for a, b in zip(starts[:-1], starts[1:]):
        partner[a:b] = rng.permutation(order[a:b])
    a, b = image_index[order], image_index[partner]
    keep = np.flatnonzero(a != b)
    if at_most is not None and len(keep) > at_most:
        keep = np.sort(rng.choice(keep, at_most, replace=False))
    return a[keep], b[keep]


def mined_pairs(x: np.ndarray, texts: list[np.ndarray], image_index: np.ndarray,
                ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """(a, b): the distinct images of the pairs of tokens that the pair model would call one sign
    (``text_positives`` on the token features x), pairs of one image twice left out."""
    a, b = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    for t, _, i, j in text_positives(x, texts, ratio):
        a.append(image_index[t[i]])
        b.append(image_index[t[j]])
    a, b = np.concatenate(a), np.concatenate(b)
    keep = a != b
    return a[keep], b[keep]


def group_sums(x: np.ndarray, z: np.ndarray, k: int) -> np.ndarray:
    """(k, D) float64 sum of the rows x (n, D) of each group z (n,) in 0..k-1. The same sums as
    ``np.add.at`` (each group's rows added in index order, in float64) by one sparse product,
    many times faster (benchmarks/bench_exact_speedups.py)."""
    members = sparse.csr_matrix((np.ones(len(z)), (z, np.arange(len(z)))), shape=(k, len(z)))    # (k, n)
    return np.asarray(members @ x.astype(np.float64))


def text_centre(x: np.ndarray, text_index: np.ndarray, kappa: float) -> np.ndarray:
    """Remove each text's mean feature (its hand), shrunk by n_t / (n_t + kappa) towards none:
    a text of 2 tokens says little about its hand, one of 50 a lot."""
    if kappa <= 0:
        return x
    n_t = np.bincount(text_index).astype(np.float64)
    means = group_sums(x, text_index, len(n_t)) / np.maximum(n_t, 1)[:, None]
    shrink = (n_t / (n_t + kappa))[:, None]
    return (x - shrink[text_index] * (means[text_index] - x.mean(0))).astype(np.float32)


def text_shears(slant: np.ndarray, text_index: np.ndarray, kappa: float) -> np.ndarray:
    """(n,) each token's slant, (n,) its text -> (n,) the shear that undoes its hand's slant: the
    median slant of its text less the median of the corpus, shrunk by n_t / (n_t + kappa) towards
    none. One writer slants every sign of a text alike; the median over the text's signs leaves
    each sign's own slant (a diagonal stroke, an italic form) where it is among the others."""
    n_t = np.bincount(text_index)                       # every text holds a token (np.unique's inverse)
    ranked = slant[np.lexsort((slant, text_index))]     # by text, each text's slants sorted
    start = np.cumsum(n_t) - n_t
    median = 0.5 * (ranked[start + (n_t - 1) // 2] + ranked[start + n_t // 2])
    shrink = n_t / (n_t + kappa)
    return (shrink * (median - np.median(slant)))[text_index]


@dataclass
class PairModel:
    """log-odds(two tokens at distance d show the same sign) = a - b d, fitted on the corpus."""
    a: float
    b: float
    n_positive: int

    def log_odds(self, d: np.ndarray) -> np.ndarray:
        return self.a - self.b * d

    @property
    def even_odds(self) -> float:
        return self.a / self.b


def text_positives(x: np.ndarray, texts: list[np.ndarray], ratio: float):
    """For each text of 3+ tokens: (t, d, i, j), d its (len(t), len(t)) distance matrix (diagonal
    inf) and i < j the positions of its mutual nearest neighbours whose distance is below
    ``ratio`` x i's distance to its second nearest: the pairs the pair model calls one sign."""
    from scipy.spatial.distance import cdist
    for t in texts:
        if len(t) < 3:
            continue
        d = cdist(x[t], x[t])
        np.fill_diagonal(d, np.inf)
        order = np.argsort(d, axis=1)
        idx = np.arange(len(t))
        d1, d2 = d[idx, order[:, 0]], d[idx, order[:, 1]]
        i = np.flatnonzero((order[order[:, 0], 0] == idx) & (d1 <= ratio * d2) & (idx < order[:, 0]))
        yield t, d, i, order[i, 0]


def confident_pairs(x: np.ndarray, texts: list[np.ndarray], ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """Within each text: the distances of its positives (``text_positives``) and of every pair of
    the text (the background)."""
    pos, allp = [], []
    for t, d, i, j in text_positives(x, texts, ratio):
        pos.append(d[i, j])
        allp.append(d[np.triu_indices(len(t), 1)])
    cat = lambda parts: np.concatenate(parts) if parts else np.zeros(0)  # noqa: E731
    return cat(pos), cat(allp)


def fit_pair_model(x: np.ndarray, texts: list[np.ndarray], ratio: float, seed: int) -> PairModel | None:
    """Balanced logistic fit of positives against the within-text background; None when the
    corpus has too few texts of 3+ tokens, or no distance spread to learn from."""
    pos, background = confident_pairs(x, texts, ratio)
    if len(pos) < 5 or len(background) < 20 or np.ptp(np.r_[pos, background]) == 0:
        return None
    rng = np.random.default_rng(seed)
    return balanced_pair_fit(pos, background[rng.permutation(len(background))[:20000]])


def balanced_pair_fit(pos: np.ndarray, neg: np.ndarray) -> PairModel | None:
    """Logistic fit of same-sign distances ``pos`` against ``neg``, the two classes weighted
    equally; None when distance does not lower the odds (b <= 0)."""
    from sklearn.linear_model import LogisticRegression
    d = np.r_[pos, neg][:, None]
    y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    w = np.r_[np.full(len(pos), 0.5 / len(pos)), np.full(len(neg), 0.5 / len(neg))] * len(y)
    lr = LogisticRegression().fit(d, y, sample_weight=w)
    b = -float(lr.coef_[0, 0])
    return PairModel(float(lr.intercept_[0]), b, len(pos)) if b > 0 else None


def refit_pair_model(x: np.ndarray, z: np.ndarray, texts: list[np.ndarray], seed: int,
                     n_pairs: int = 20000) -> PairModel | None:
    """The pair model again, with the types found as supervision and the same-hand guarantee kept:
    within each text, pairs of tokens of one type (positives) against pairs of different types.
    Pairs across texts would teach the model that two hands' variants of a sign are far apart,
    and the merge pass that follows would lump (the across-text refit did: greek_hands K 57 -> 21)."""
    from scipy.spatial.distance import pdist
    pos, neg = [], []
    for t in texts:
        if len(t) < 2:
            continue
        iu = np.triu_indices(len(t), 1)
        same = z[t][iu[0]] == z[t][iu[1]]
        d = pdist(x[t])                                             # (len(t) choose 2,), triu order
        pos.append(d[same])
        neg.append(d[~same])
    if not pos:
        return None
    pos, neg = np.concatenate(pos), np.concatenate(neg)
    if len(pos) < 20 or len(neg) < 20 or np.ptp(np.r_[pos, neg]) == 0:
        return None
    rng = np.random.default_rng(seed)
    return balanced_pair_fit(pos[rng.permutation(len(pos))[:n_pairs]], neg[rng.permutation(len(neg))[:n_pairs]])


def corpus_pair_model(x: np.ndarray, texts: list[np.ndarray], ratio: float, seed: int,
                      sample: int = 3000) -> PairModel | None:
    """The pair model from within-text pairs; where texts are too short for that, from the corpus
    as one text (a random sample of ``sample`` tokens: the same ratio test, without the same-hand
    guarantee); where the ratio test finds too few pairs (a small corpus whose every sign recurs
    alike), from plain mutual nearest neighbours."""
    pick = np.sort(np.random.default_rng(seed).permutation(len(x))[:sample])
    for groups, r in ((texts, ratio), ([pick], ratio), ([pick], 1.0)):
        pair = fit_pair_model(x, groups, r, seed)
        if pair is not None:
            return pair
    return None


def micro_clusters(x: np.ndarray, image_index: np.ndarray, clean: bool, pair: PairModel | None,
                   cfg: LMConfig, seed: int, tree: np.ndarray | None = None) -> np.ndarray:
    """The starting partition: distinct images (clean corpus), else average linkage cut where the
    pair model's odds are even (k-means with n/8 clusters above max_linkage_tokens); at most
    ``max_types`` clusters either way (k-means of the visual features beyond that). ``tree``: the
    average-linkage tree of x when already built (``LMSignClusterer.graph``: every pair model cuts
    the same tree, at its own height)."""
    from signclust.models.baselines._nets import faiss_kmeans
    if clean or pair is None:
        z = np.unique(image_index, return_inverse=True)[1]
    elif len(x) > cfg.max_linkage_tokens:
        z = faiss_kmeans(x, min(cfg.max_types, max(2, len(x) // 8)), seed=seed, niter=20)[0]
    else:
        from scipy.cluster.hierarchy import fcluster, linkage
        z = fcluster(linkage(x, "average") if tree is None else tree, pair.even_odds, "distance") - 1
    if z.max() + 1 > cfg.max_types:
        z = faiss_kmeans(x, cfg.max_types, seed=seed, niter=20)[0]
    return z


# --------------------------------------------------------------------------- the three terms
def context_counts(z: np.ndarray, texts: list[np.ndarray], k: int, ref: np.ndarray | None = None,
                   k_ref: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """L[c, j]: tokens of type c preceded by a token of context symbol j; R[c, j]: followed by
    one. Context symbols are the types themselves, or ``ref`` (a fixed coarser partition) when
    given. Column k_ref is the text boundary (BOS on the left, EOS on the right)."""
    ref, k_ref = (z, k) if ref is None else (ref, k_ref)
    tokens = np.concatenate([np.asarray(t, dtype=np.int64) for t in texts] or [np.zeros(0, np.int64)])
    prev, nxt = neighbour_symbols(texts, ref, len(z), k_ref)
    rows = z[tokens] * (k_ref + 1)

    def counts(cols: np.ndarray) -> np.ndarray:                       # integer counts: exact in any order
        return np.bincount(rows + cols, minlength=k * (k_ref + 1)).reshape(k, k_ref + 1).astype(np.float64)
    return counts(prev[tokens]), counts(nxt[tokens])


def neighbour_symbols(texts: list[np.ndarray], symbols: np.ndarray, n: int,
                      boundary: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(n,) each token's left and right neighbour's symbol in its text; ``boundary`` (default
    symbols.max() + 1) across a text's edge, and for a token in no text."""
    boundary = int(symbols.max()) + 1 if boundary is None else boundary
    prev, nxt = np.full(n, boundary, dtype=np.int64), np.full(n, boundary, dtype=np.int64)
    tokens = np.concatenate([np.asarray(t, dtype=np.int64) for t in texts] or [np.zeros(0, np.int64)])
    if not len(tokens):
        return prev, nxt
    lens = np.array([len(t) for t in texts], dtype=np.int64)
    ends = np.cumsum(lens)[lens > 0]                                  # non-empty texts' ends in tokens
    starts = ends - lens[lens > 0]
    sym = symbols[tokens]
    left, right = np.roll(sym, 1), np.roll(sym, -1)                  # the neighbours in the concatenation
    left[starts], right[ends - 1] = boundary, boundary                # across a text's edge: the boundary
    prev[tokens], nxt[tokens] = left, right
    return prev, nxt


def log_dm(counts: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """log Dirichlet-multinomial marginal likelihood of each row of counts (sequence form):
    the log probability of the row's outcomes, each predicted from the ones before it. alpha (m,)
    for rows of m counts. Only the nonzero counts are summed (a zero count's term is 0): the rows
    are a few types' neighbours out of k + 1."""
    total = alpha.sum()
    flat = counts.reshape(-1, counts.shape[-1])                       # (rows, m)
    rows, cols = np.nonzero(flat)
    a, c = alpha[cols], flat[rows, cols]
    terms = np.bincount(rows, weights=gammaln(a + c) - gammaln(a), minlength=len(flat))   # summed in order
    return gammaln(total) - gammaln(total + counts.sum(-1)) + terms.reshape(counts.shape[:-1])


def context_prior(ref: np.ndarray, n_texts: int, k: int, beta: float) -> np.ndarray:
    """Dirichlet parameters of the context rows: beta (k + 1) x the context symbol (and
    boundary) frequencies."""
    freq = np.r_[np.bincount(ref, minlength=k), n_texts].astype(np.float64)
    return beta * (k + 1) * freq / freq.sum()


def dm_bayes_factor(a: np.ndarray, b: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """log Bayes factor of one shared Dirichlet-multinomial for the rows of counts a and b against
    one each: log_dm(a + b) - log_dm(a) - log_dm(b)."""
    return log_dm(a + b, alpha) - log_dm(a, alpha) - log_dm(b, alpha)


def lm_gain(left: np.ndarray, right: np.ndarray, alpha: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """dL_LM for merging u[i] with v[i]: log Bayes factor of one shared left and one shared right
    context distribution against two of each."""
    return dm_bayes_factor(left[u], left[v], alpha) + dm_bayes_factor(right[u], right[v], alpha)


def neighbour_evidence(z: np.ndarray, texts: list[np.ndarray], symbols: np.ndarray, beta: float) -> float:
    """log P(every token's left and right neighbour symbol | the types z), in nats: L_LM read over
    fixed symbols (``symbols``, one per token), a Dirichlet-multinomial per type and side with
    ``context_prior`` (beta per symbol on average). The symbols do not change with z, so fits with
    other numbers of types predict the same data and compare: too many types spread the counts
    thin, two signs in one type blur their neighbours."""
    k, k_s = int(z.max()) + 1, int(symbols.max()) + 1
    left, right = context_counts(z, texts, k, symbols, k_s)                              # (k, k_s+1)
    alpha = context_prior(symbols, len(texts), k_s, beta)
    return float(log_dm(left, alpha).sum() + log_dm(right, alpha).sum())


def two_means(x: np.ndarray, rounds: int = 10) -> np.ndarray:
    """(n, D) -> (n,) bool: a bipartition by Lloyd's 2-means, started from the sign of each row's
    projection on the first principal axis (no random start: the same rows give the same cut)."""
    c = x.astype(np.float64) - x.mean(0)
    side = c @ np.linalg.svd(c, full_matrices=False)[2][0] > 0
    for _ in range(rounds):
        if side.all() or not side.any():
            break
        a, b = c[side].mean(0), c[~side].mean(0)
        new = ((c - a) ** 2).sum(1) < ((c - b) ** 2).sum(1)
        if (new == side).all():
            break
        side = new
    return side


def benjamini_hochberg(p: np.ndarray, q: float) -> np.ndarray:
    """(m,) p-values -> (m,) bool: the discoveries of the Benjamini-Hochberg step-up procedure at
    false discovery rate q (the largest i with p_(i) <= i q / m, and every p at or below it)."""
    m = len(p)
    if not m:
        return np.zeros(0, dtype=bool)
    ranked = np.sort(p)
    passed = np.flatnonzero(ranked <= q * np.arange(1, m + 1) / m)
    return p <= ranked[passed[-1]] if len(passed) else np.zeros(m, dtype=bool)


def split_types(z: np.ndarray, x: np.ndarray, texts: list[np.ndarray], symbols: np.ndarray, beta: float,
                margin: float, avoid: float, fdr: float, seed: int, null_cuts: int = 999,
                min_tokens: int = 4) -> tuple[np.ndarray, int]:
    """One pass of split moves (``splits``): every type of at least ``min_tokens`` tokens is cut in
    two by ``two_means`` of its features x, and the cut is kept where

    - the two halves predict their neighbours' fixed ``symbols`` better as two types than as one:
      ``neighbour_evidence`` gains more than ``margin`` nats (the negative of ``lm_gain`` over the
      symbols);
    - that gain is not chance: its p-value against ``null_cuts`` random cuts of the type into parts
      of the same sizes (a permutation test), over every type tried, passes the Benjamini-Hochberg
      procedure at false discovery rate ``fdr``. The Dirichlet prior is weak: a type of one sign cut
      anywhere gains more than 2 nats in about a fifth of types of 24 tokens (tests/test_lm_clusterer.py),
      and a corpus whose order says nothing must keep its types;
    - the halves share texts (``avoidance`` above ``-avoid``): the halves of one sign written by
      two hands keep to different texts, and their neighbours are those hands' too, so the symbols
      (a Ward cut of the same features) can favour a cut by hand. Two signs share texts.

    The merges can only join; a type that holds two signs, which the micro-clusters or a merge on
    flat evidence made, is cut here. Returns the new labels (0..K-1) and the number of cuts."""
    z = np.unique(z, return_inverse=True)[1]
    k, k_s = int(z.max()) + 1, int(symbols.max()) + 1
    alpha = context_prior(symbols, len(texts), k_s, beta)
    prev, nxt = neighbour_symbols(texts, symbols, len(z))
    rng = np.random.default_rng(seed)
    order = np.argsort(z, kind="stable")
    members = np.split(order, np.cumsum(np.bincount(z, minlength=k))[:-1])      # tokens of each type
    tried, sides, p_values = [], [], []
    for t, m in enumerate(members):
        if len(m) < min_tokens:
            continue
        side = two_means(x[m])
        if side.all() or not side.any():
            continue
        # the cut and null_cuts random cuts of the same sizes, (1 + null_cuts, len(m)) as 0/1 rows
        null = np.argsort(rng.random((null_cuts, len(m))), axis=1) < side.sum()
        cuts = np.r_[side[None], null].astype(np.float64)
        gain = np.zeros(len(cuts))
        for sym in (prev, nxt):
            onehot = np.eye(k_s + 1)[sym[m]]                                    # (len(m), k_s+1)
            a = cuts @ onehot                                                     # each cut's one part
            gain -= dm_bayes_factor(a, onehot.sum(0) - a, alpha)
        if gain[0] > margin:
            tried.append(t)
            sides.append(side)
            p_values.append((1 + np.sum(gain[1:] >= gain[0])) / (1 + null_cuts))
    found = benjamini_hochberg(np.array(p_values), fdr)
    trial, halves = z.copy(), []
    for t, side, ok in zip(tried, sides, found):
        if ok:
            trial[members[t][side]] = k + len(halves)              # the half becomes a type of its own
            halves.append(t)
    if not halves:
        return z, 0
    u, v = np.array(halves), k + np.arange(len(halves))
    keep = avoidance(trial, k + len(halves), texts, u, v) > -avoid
    back = np.arange(k + len(halves))
    back[v[~keep]] = u[~keep]                                    # a cut not kept: its half goes home
    return np.unique(back[trial], return_inverse=True)[1], int(keep.sum())


def hom_gain(x: np.ndarray, z: np.ndarray, k: int, pair: PairModel, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """dL_hom: the pair model's log-odds at the RMS distance between the two types' tokens."""
    size = np.bincount(z, minlength=k).astype(np.float64)
    cen = group_sums(x, z, k) / size[:, None]
    sq = np.bincount(z, weights=(x.astype(np.float64) ** 2).sum(1), minlength=k) / size
    rms = np.sqrt(np.maximum(sq[u] + sq[v] - 2 * (cen[u] * cen[v]).sum(1), 0.0))
    return pair.log_odds(rms)


@dataclass(frozen=True)
class TextPairs:
    """Every pair of tokens i < j of one text, texts in order, with the pair model's log-odds: what
    ``within_text_evidence`` sums. Fixed while only the labelling changes, so a merge pass makes
    it once, not once a round."""
    i: np.ndarray          # (P,) the pair's first token
    j: np.ndarray          # (P,) its second token, later in the same text
    text: np.ndarray       # (P,) the text's index in ``texts``
    log_odds: np.ndarray   # (P,) pair.log_odds of the two tokens' distance


def text_pairs(x: np.ndarray, texts: list[np.ndarray], pair: PairModel) -> TextPairs:
    from scipy.spatial.distance import cdist
    parts = [(np.zeros(0, dtype=np.int64),) * 3 + (np.zeros(0),)]
    for n, t in enumerate(texts):
        if len(t) < 2:
            continue
        iu = np.triu_indices(len(t), 1)
        parts.append((t[iu[0]], t[iu[1]], np.full(len(iu[0]), n), pair.log_odds(cdist(x[t], x[t]))[iu]))
    return TextPairs(*(np.concatenate(p) for p in zip(*parts)))


def within_text_evidence(x: np.ndarray, z: np.ndarray, k: int, texts: list[np.ndarray],
                         pair: PairModel, count: str = "pairs", pairs: TextPairs | None = None) -> sparse.csr_matrix:
    """(k, k) sum over texts of the pair model's log-odds between the tokens of type u and the
    tokens of type v *in the same text*. One text is one hand, so this compares like with like:
    two different signs that share texts look different there; the fragments of one sign split
    by hand never share a text and get no evidence against their merge.

    ``count``: ``pairs`` adds every pair's log-odds; ``tokens`` divides a text's sum for (u, v) by
    the larger of u's and v's token counts in that text, so that each token of the smaller type
    counts once: its pairs with the m tokens of the other type are one comparison (one token
    against one sign as one hand writes it), not m independent ones. Summed over pairs, one
    distorted token in a text holding ten copies of its sign weighs ten times its odds against
    the merge, and a handwriting corpus keeps such tokens as types of their own.

    ``pairs``: ``text_pairs(x, texts, pair)``, when the caller keeps it across labellings."""
    if count not in ("pairs", "tokens"):
        raise ValueError(f"within_text_evidence: count {count!r} is not one of pairs, tokens")
    pairs = text_pairs(x, texts, pair) if pairs is None else pairs
    if not len(pairs.i):
        return sparse.csr_matrix((k, k))
    a, b = z[pairs.i], z[pairs.j]
    keep = a != b
    lo = pairs.log_odds
    if count == "tokens":
        in_text = np.concatenate(texts)
        text_of = np.repeat(np.arange(len(texts)), [len(t) for t in texts])
        n_in_text = np.bincount(text_of * k + z[in_text], minlength=len(texts) * k)   # (T * k,) tokens of a type in a text
        lo = lo / np.maximum(n_in_text[pairs.text * k + a], n_in_text[pairs.text * k + b])
    return sparse.csr_matrix((lo[keep], (np.minimum(a, b)[keep], np.maximum(a, b)[keep])), shape=(k, k))


def nearest_link(edges: tuple[np.ndarray, np.ndarray, np.ndarray], z: np.ndarray, k: int) -> sparse.csr_matrix:
    """(k, k) smallest token-to-token distance between two types over a token kNN graph
    (``edges`` = (i, j, d)); stored as 1 / (1 + d) so that absent links read as 0."""
    i, j, d = edges
    a, b = z[i], z[j]
    keep = a != b
    a, b, d = np.minimum(a, b)[keep], np.maximum(a, b)[keep], d[keep]
    if not len(d):                                      # every kNN edge inside a type: no links
        return sparse.csr_matrix((k, k))
    # one entry per (a, b) pair, the largest 1 / (1 + d) (coo -> csr would sum duplicates instead)
    best = sparse.coo_matrix((1.0 / (1.0 + d), (a, b)), shape=(k, k))
    order = np.lexsort((-best.data, best.row * k + best.col))
    key = best.row[order] * k + best.col[order]
    first = np.r_[True, key[1:] != key[:-1]]
    return sparse.csr_matrix((best.data[order][first], (best.row[order][first], best.col[order][first])), shape=(k, k))


def coarse_symbols(x: np.ndarray, n: int, max_linkage_tokens: int, seed: int) -> np.ndarray:
    """(n_tokens,) a few hand-invariant context symbols: Ward's cut of the tokens into ``n``
    clusters (k-means above ``max_linkage_tokens``, where Ward's distance matrix gets too big)."""
    n = min(n, len(x))
    if len(x) > max_linkage_tokens:
        from signclust.models.baselines._nets import faiss_kmeans
        return faiss_kmeans(x, n, seed=seed, niter=20)[0]
    from scipy.cluster.hierarchy import fcluster, ward
    return fcluster(ward(x), n, "maxclust") - 1


def avoidance(z: np.ndarray, k: int, texts: list[np.ndarray], u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """How strongly types u[i] and v[i] avoid each other's texts: log P(at most the observed
    number of u's tokens fall in texts that hold v | u spread over texts by length, Poisson),
    and the same with u and v swapped; the weaker (larger) of the two. About 0 for pairs that
    mix freely or are too rare to tell; very negative for two frequent types in complementary
    distribution, as the forms of one sign written by different hands are."""
    from scipy.stats import poisson
    text_of = np.concatenate([np.full(len(t), j) for j, t in enumerate(texts)])
    counts = sparse.csr_matrix((np.ones(len(text_of)), (z[np.concatenate(texts)], text_of)),
                               shape=(k, len(texts)))                                  # (k, T) tokens per text
    present = (counts > 0).astype(np.float64)
    length = np.array([len(t) for t in texts], dtype=np.float64)
    n = np.asarray(counts.sum(1)).ravel()
    covered = (present @ length) / length.sum()          # (k,) share of all tokens in texts holding c
    seen_uv = np.asarray(counts[u].multiply(present[v]).sum(1)).ravel()
    seen_vu = np.asarray(counts[v].multiply(present[u]).sum(1)).ravel()
    return np.maximum(poisson.logcdf(seen_uv, n[u] * covered[v]), poisson.logcdf(seen_vu, n[v] * covered[u]))


def near_rate(edges: tuple[np.ndarray, np.ndarray, np.ndarray], z: np.ndarray, k: int) -> np.ndarray:
    """(k,) the rate at which the kNN edges of another sign's tokens land in each type, read off the
    tokens near it: the mean share of its edges that a token outside the type sends into it, over
    the tokens that send it at least one edge and at most half of them (a token that sends more is
    likelier the type's own sign split off). A type no such token reaches: the share of one edge of
    the mean token (N / E)."""
    i, j, _ = edges
    out = z[i] != z[j]
    per_token = np.bincount(i, minlength=len(z)).astype(np.float64)       # (N,) kNN edges of each token
    # (N, k) edges from each token into each other type; csr sums the repeated (token, type) entries
    to_type = sparse.csr_matrix((np.ones(int(out.sum())), (i[out], z[j[out]])), shape=(len(z), k)).tocoo()
    share = to_type.data / per_token[to_type.row]
    near = share <= 0.5
    count = np.bincount(to_type.col[near], minlength=k)
    total = np.bincount(to_type.col[near], weights=share[near], minlength=k)
    rate = np.where(count > 0, total / np.maximum(count, 1), len(z) / max(len(i), 1))
    return np.clip(rate, 1e-6, 1 - 1e-6)


def cohesion(edges: tuple[np.ndarray, np.ndarray, np.ndarray], z: np.ndarray, k: int) -> np.ndarray:
    """(k,) how far each type holds together on the kNN graph: the kNN edges its tokens send to each
    other over the most they could (each token min(edges per token, size - 1)); 0 for a single token.
    A whole sign with fewer tokens than a token has neighbours fills every slot it has (1) and must
    send the rest of its edges out, to its visually nearest other sign; an outlier of a larger sign
    split off as a type of its own sends its edges out by choice."""
    i, j, _ = edges
    per_token = len(i) / max(len(z), 1)
    size = np.bincount(z, minlength=k).astype(np.float64)
    inside = np.bincount(z[i][z[i] == z[j]], minlength=k).astype(np.float64)
    slots = size * np.minimum(per_token, size - 1)
    return np.where(slots > 0, inside / np.maximum(slots, 1e-12), 0.0)


def knn_vote(edges: tuple[np.ndarray, np.ndarray, np.ndarray], z: np.ndarray, k: int, u: np.ndarray,
             v: np.ndarray, mode: str) -> np.ndarray:
    """Log-likelihood ratio, in nats, that the smaller type s of each pair (u on a tie) is the
    larger type big's sign, from where the kNN edges (``edges`` = (i, j, d)) of s's tokens land
    outside s. Same sign: each edge lands in big at the rate p1 at which an edge stays inside its
    type (over the whole graph); another sign: at a rate p0. m of s's n leaving edges land in big:
    m log(p1 / p0) + (n - m) log((1 - p1) / (1 - p0)). Only the edges that leave s count, which is
    exact for a single token and understates the evidence for a larger s (its edges inside s would
    land in the merged type too). ``mode``:
      edge   p0: the rate at which edges from outside big land in big, every edge independent;
      token  the same, each token counted once (the sum divided by the edges per token: the edges
             of one token are far from independent);
      near   p0: ``near_rate``, the rate of the tokens near big that are another sign (every edge
             counted, as in edge) -- a rare sign's few neighbours in a rare type are not evidence
             of one sign, as they are under edge -- and no vote (-inf) where p0 >= p1;
      near_loose  near times 1 - ``cohesion`` of s: the edges that leave a type whose tokens fill
             their kNN slots with each other are the ones a whole sign of that size must send out, not
             evidence that it belongs elsewhere (a single token, cohesion 0, votes as under near)."""
    if mode not in KNN_VOTE_MODES:
        raise ValueError(f"knn_vote: mode {mode!r} is not one of {', '.join(KNN_VOTE_MODES)}")
    i, j, _ = edges
    a, b = z[i], z[j]
    out = a != b                                                           # (E,) edges leaving a type
    p1 = float(np.clip(1.0 - out.mean(), 1e-6, 1 - 1e-6))
    leaving = np.bincount(a[out], minlength=k).astype(np.float64)          # (k,) edges leaving each type
    between = sparse.csr_matrix((np.ones(int(out.sum())), (a[out], b[out])), shape=(k, k))   # (k, k) edges type -> type
    size = np.bincount(z, minlength=k)
    s, big = np.where(size[u] <= size[v], u, v), np.where(size[u] <= size[v], v, u)
    m, n = np.asarray(between[s, big]).ravel(), leaving[s]
    if mode in ("near", "near_loose"):
        p0 = near_rate(edges, z, k)[big]
    else:
        arriving = np.bincount(b[out], minlength=k).astype(np.float64)     # (k,) edges from outside into it
        p0 = np.clip(arriving[big] / np.maximum(out.sum() - leaving[big], 1.0), 1e-6, 1 - 1e-6)
    llr = m * np.log(p1 / p0) + (n - m) * np.log((1 - p1) / (1 - p0))
    if mode == "token":
        return llr / (len(i) / len(z))
    if mode == "near_loose":
        llr = llr * (1.0 - cohesion(edges, z, k)[s])
    return np.where(p1 > p0, llr, -np.inf) if mode in ("near", "near_loose") else llr


def crp_concentration(k: int, n: int) -> float:
    """The Chinese restaurant process's concentration alpha under which k tables are expected for n
    customers: alpha (psi(alpha + n) - psi(alpha)) = k, the Ewens maximum-likelihood estimate of alpha
    from a partition of n tokens into k types (it depends on k and n, not on the types' sizes).
    1 <= k <= n; the two ends are reached only in the limit and return the search's ends: 1e-12 at
    k = 1, 1e12 at k = n."""
    from scipy.optimize import brentq
    from scipy.special import digamma
    if not 1 <= k <= n:
        raise ValueError(f"crp_concentration: k {k} is not between 1 and n {n}")
    lo, hi = np.log(1e-12), np.log(1e12)
    if k == 1 or k == n:
        return float(np.exp(lo if k == 1 else hi))

    def excess(log_alpha: float) -> float:
        a = np.exp(log_alpha)
        return a * (digamma(a + n) - digamma(a)) - k
    return float(np.exp(brentq(excess, lo, hi, xtol=1e-12)))


def crp_seat_odds(size: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """log-odds, in nats, that the Chinese restaurant process seats a lone token at the other type's
    table rather than at a new one, for each pair (u[i], v[i]) in which one type holds one token:
    log(n_other / alpha), alpha = ``crp_concentration`` of the current types; 0 for other pairs. It is
    exactly the change of the CRP's log probability of the partition when the lone token joins (two
    lone tokens: -log alpha). An alphabet (few types, each frequent) seats an outlying token of a
    frequent sign with its sign; a script of hundreds of rare signs keeps it apart. alpha is
    estimated afresh each merge round from the current K, which starts at the micro-clusters': the
    early rounds, with K far above the final one, hold lone tokens apart hardest (where nearly every
    micro-cluster is one token alpha grows towards n^2 / 2 and the odds approach -2 log n)."""
    size = np.asarray(size, dtype=np.float64)
    alpha = crp_concentration(int((size > 0).sum()), int(size.sum()))
    small, big = np.minimum(size[u], size[v]), np.maximum(size[u], size[v])
    return np.where(small == 1, np.log(big / alpha), 0.0)


def dup_prior(rank: np.ndarray, c0: float) -> np.ndarray:
    """Prior log-odds of a merge: -c0 for the visually nearest type, less by log(rank) further out."""
    return -c0 - np.log(rank)


# --------------------------------------------------------------------------- merge moves
def candidate_pairs(cen: np.ndarray, left: np.ndarray, right: np.ndarray, k_nn: int, by_context: bool = True):
    """Each type's visually nearest and (with ``by_context``) context-nearest types; returns
    (u, v, visual rank, match ratio), u < v; the match ratio is finite for mutual nearest types:
    their distance over the distance to either one's second nearest type (Lowe's ratio test)."""
    from scipy.spatial.distance import cdist
    k = len(cen)
    d = cdist(cen, cen)
    np.fill_diagonal(d, np.inf)
    rank_of = np.empty_like(d, dtype=np.int64)
    order = np.argsort(d, axis=1)
    rank_of[np.arange(k)[:, None], order] = np.arange(1, k + 1)
    prof = np.concatenate([left, right], axis=1)
    prof /= np.linalg.norm(prof, axis=1, keepdims=True) + 1e-12
    sim = prof @ prof.T
    np.fill_diagonal(sim, -np.inf)
    kk = min(k_nn, k - 1)
    partners = order[:, :kk]
    if by_context:
        partners = np.concatenate([partners, np.argsort(-sim, axis=1)[:, :kk]], axis=1)
    u = np.repeat(np.arange(k), partners.shape[1])
    v = partners.ravel()
    pairs = np.unique(np.stack([np.minimum(u, v), np.maximum(u, v)], 1), axis=0)
    u, v = pairs[:, 0], pairs[:, 1]
    d1, d2 = d[np.arange(k), order[:, 0]], d[np.arange(k), order[:, 1]] if k > 2 else np.full(k, np.inf)
    ratio = np.maximum(d1[u], d1[v]) / np.maximum(np.minimum(d2[u], d2[v]), 1e-12)
    mutual = (order[u, 0] == v) & (order[v, 0] == u)
    return u, v, np.minimum(rank_of[u, v], rank_of[v, u]), np.where(mutual, ratio, np.inf)


# --------------------------------------------------------------------------- a sign's forms (clean corpus)
def forms_per_type(z: np.ndarray, form_of_token: np.ndarray, k: int) -> np.ndarray:
    """(k,) how many distinct forms (images) each type's tokens show."""
    pairs = np.unique(np.stack([z, form_of_token], 1), axis=0)
    return np.bincount(pairs[:, 0], minlength=k)


class FormOccupancy:
    """log P(a type of n tokens shows exactly f distinct forms) when it is one sign of F forms and each
    token's form is drawn at random with the shares a complete sign shows (``fit``: the types of F forms
    and at least ``min_tokens`` tokens, each one's shares sorted, averaged; uniform where there are none).
    A frequent type with fewer than F forms is unlikely as a whole sign: the italic forms of a sign,
    typeset 49 times, as a type of their own (log P about -53 nats) beside the sign's other 93 tokens in
    two forms (-37); together they are likely (0). Two lone tokens of one sign are nearly as likely
    apart as together (log 2/3), so rare signs are left to context and the visual terms."""

    MAX_FORMS = 6          # log_p enumerates the subsets of the F forms and theirs: 3^F terms

    def __init__(self, shares: np.ndarray):
        self.p = np.sort(np.asarray(shares, dtype=np.float64))[::-1]         # (F,), descending, sum 1
        self.F = len(self.p)
        self._subsets = [np.array(s, dtype=np.int64) for f in range(1, self.F + 1)
                         for s in itertools.combinations(range(self.F), f)]

    @classmethod
    def fit(cls, forms_of_type: list[np.ndarray], capacity: int, min_tokens: int = 10) -> "FormOccupancy":
        """``forms_of_type``: each type's token counts per form (any order)."""
        full = [np.sort(c)[::-1] / c.sum() for c in forms_of_type if len(c) == capacity and c.sum() >= min_tokens]
        return cls(np.mean(full, axis=0) if full else np.full(capacity, 1.0 / capacity))

    def log_p(self, n: np.ndarray, f: np.ndarray) -> np.ndarray:
        """(len(n),) log P(exactly f of the F forms seen in n draws); f above F counts as F."""
        n = np.asarray(n, dtype=np.float64)
        f = np.minimum(np.asarray(f, dtype=np.int64), self.F)
        out = np.full(len(n), -np.inf)
        for size in np.unique(f):
            sel = f == size
            terms = []
            for s in (s for s in self._subsets if len(s) == size):
                ps = self.p[s].sum()
                # P(every draw in s, each of s seen) = sum over T in s of (-1)^{|s|-|T|} p_T^n (inclusion-exclusion),
                # read as p_s^n times a sum of ratios <= 1 (no underflow for large n)
                corr = np.zeros(sel.sum())
                for t in range(1, size + 1):
                    for sub in itertools.combinations(s.tolist(), t):
                        corr += (-1) ** (size - t) * (self.p[list(sub)].sum() / ps) ** n[sel]
                terms.append(n[sel] * np.log(ps) + np.log(np.maximum(corr, 1e-300)))
            out[sel] = np.logaddexp.reduce(np.stack(terms), axis=0)
        return out

    def merge_gain(self, n: np.ndarray, f: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """log P of (u, v) as one type against as two, from the types' tokens n and forms f (disjoint forms)."""
        return self.log_p(n[u] + n[v], f[u] + f[v]) - self.log_p(n[u], f[u]) - self.log_p(n[v], f[v])


def occupancy_model(z: np.ndarray, form_of_token: np.ndarray, capacity: int) -> FormOccupancy | None:
    """``FormOccupancy`` fitted on the types of ``z`` (tokens per form of each type); None above
    ``FormOccupancy.MAX_FORMS`` forms a sign (its subsets are enumerated)."""
    if capacity > FormOccupancy.MAX_FORMS:
        return None
    m = int(form_of_token.max()) + 1
    # the (type, form) pairs that occur, in order of type: O(n), not a (k, m) table
    pair, tokens = np.unique(np.asarray(z, dtype=np.int64) * m + form_of_token, return_counts=True)
    return FormOccupancy.fit(np.split(tokens, np.flatnonzero(np.diff(pair // m)) + 1), capacity)


def form_capacity(forms: np.ndarray, size: np.ndarray, min_tokens: int = 10) -> int:
    """How many forms (distinct images) one sign shows in a clean corpus: the median number of forms
    of the types of at least ``min_tokens`` tokens (a sign seen that often in free variation shows
    each of its typefaces' forms); 1 where no type is that large. ``forms``, ``size``: (k,) each
    type's distinct images and tokens."""
    large = size >= min_tokens
    return int(np.median(forms[large])) if large.any() else 1


@dataclass(frozen=True)
class TwoCovariance:
    """The two-covariance model (Ioffe's probabilistic LDA) of a sign's forms: a form's feature is
    x = c + e, its sign's centre c ~ N(mean, B) and the form's offset from it e ~ N(0, W) (a
    typeface's way of drawing the sign). Fitted on the forms of the types that already hold several,
    so W is the corpus's own typeface variation; kept in the basis where W is the identity and B
    is diagonal, so the log-odds below is a sum over independent dimensions."""
    mean: np.ndarray       # (D,) the centres' mean
    basis: np.ndarray      # (D, D) the feature x -> (x - mean) @ basis
    between: np.ndarray    # (D,) B's variances in that basis (W's are 1)
    dof: int               # the forms W was estimated from, less one per type

    @classmethod
    def fit(cls, feats: np.ndarray, labels: np.ndarray, shrink: float) -> "TwoCovariance | None":
        """``feats`` (m, D) one row per form, ``labels`` (m,) its type. W: the forms' scatter about
        their type's mean, over the types of at least two forms, shrunk by ``shrink`` towards its
        diagonal; B: the scatter of the types' means less their expected share of W. None where W
        rests on fewer degrees of freedom than dimensions (too few types of several forms) or is zero."""
        k = int(labels.max()) + 1
        n = np.bincount(labels, minlength=k).astype(np.float64)
        means = group_sums(feats, labels, k) / np.maximum(n, 1)[:, None]             # (k, D)
        several = n[labels] >= 2
        dof = int(several.sum() - (n >= 2).sum())
        if dof < feats.shape[1]:
            return None
        resid = feats[several] - means[labels[several]]
        within = resid.T @ resid / dof
        within = (1 - shrink) * within + shrink * np.diag(np.diag(within))
        centre = means[n > 0].mean(0)
        spread = means[n > 0] - centre
        between = spread.T @ spread / len(spread) - within * np.mean(1.0 / n[n > 0])
        ew, vw = np.linalg.eigh(within)
        if ew.max() <= 1e-12 * feats.var(0).sum():         # the forms of a type never differ
            return None
        whiten = vw / np.sqrt(np.maximum(ew, ew.max() * 1e-6))                          # W -> identity
        lam, rot = np.linalg.eigh(whiten.T @ between @ whiten)
        return cls(centre, whiten @ rot, np.maximum(lam, 1e-3), dof)

    def project(self, feats: np.ndarray) -> np.ndarray:
        return (feats - self.mean) @ self.basis

    def log_odds(self, a: np.ndarray, na: np.ndarray, b: np.ndarray, nb: np.ndarray) -> np.ndarray:
        """log p(a, b | one centre) - log p(a, b | two centres) for types whose ``na`` and ``nb``
        forms have the projected means a and b (P, D): a type's mean of n forms is c + N(0, W / n)."""
        lam = self.between
        va, vb = lam + 1.0 / na[:, None], lam + 1.0 / nb[:, None]                      # (P, D) var(a), var(b)
        det = va * vb - lam ** 2
        one = -0.5 * (np.log(det) + (vb * a * a - 2 * lam * a * b + va * b * b) / det)
        two = -0.5 * (np.log(va) + a * a / va + np.log(vb) + b * b / vb)
        return (one - two).sum(1)


def form_pairs(means: np.ndarray, forms: np.ndarray, capacity: int, k_nn: int) -> tuple[np.ndarray, np.ndarray]:
    """Candidate pairs (u, v), u < v, of types that may be forms of one sign: together at most
    ``capacity`` forms, v among u's ``k_nn`` nearest types that have room for u's forms, in the
    projected space (or u among v's). ``means`` (k, D) the types' projected means."""
    from sklearn.neighbors import NearestNeighbors
    parts = [np.zeros((0, 2), np.int64)]
    for n in np.unique(forms[forms < capacity]):                 # u's of n forms, against the types of room
        query = np.flatnonzero(forms == n)
        fits = np.flatnonzero(forms <= capacity - n)
        kn = min(k_nn + int(2 * n <= capacity), len(fits))         # + 1 where u is among them (itself)
        if kn < 1:
            continue
        nb = NearestNeighbors(n_neighbors=kn).fit(means[fits]).kneighbors(means[query], return_distance=False)
        u, v = np.repeat(query, kn), fits[nb.ravel()]
        keep = u != v
        parts.append(np.stack([np.minimum(u, v), np.maximum(u, v)], 1)[keep])
    pairs = np.unique(np.concatenate(parts), axis=0)
    return pairs[:, 0], pairs[:, 1]


def form_move_gains(form_left: np.ndarray, form_right: np.ndarray, alpha: np.ndarray, proj: np.ndarray,
                    type_of_form: np.ndarray, k: int, model: "TwoCovariance", capacity: int, k_nn: int,
                    w_lm: float, w_hom: float, w_dup: float) -> tuple[np.ndarray, ...]:
    """Moves of one form f out of its type A (of at least two forms) into a type B with room for it,
    each with the join it frees: A less f may now take a type C that the capacity barred before. The
    gain is the objective after the move (and the join, where it gains) less before it:

        w_lm [bf(f, B) - bf(f, A - f)] + w_hom [lo(f, B) - lo(f, A - f)]
        + max(0, w_lm bf(A - f, C) + w_hom lo(A - f, C) - w_dup log K)

    with bf ``lm_gain``'s Bayes factor of one shared context distribution (contexts read over the
    current types), lo ``TwoCovariance.log_odds`` and the join's prior as in ``_join_forms``.
    ``form_left``/``form_right`` (m, k+1) each form's context counts, ``proj`` (m, D) the forms'
    projected features, ``type_of_form`` (m,). B ranges over the ``k_nn`` types nearest f that have
    room, C over the ``k_nn`` nearest A - f that fit beside it and did not beside A. Returns (form,
    B, C or -1, gain) per candidate move."""
    from sklearn.neighbors import NearestNeighbors
    empty = np.zeros(0, np.int64)
    forms = np.bincount(type_of_form, minlength=k).astype(np.float64)                 # (k,)
    means = group_sums(proj, type_of_form, k) / np.maximum(forms, 1)[:, None]          # (k, D)
    type_left, type_right = group_sums(form_left, type_of_form, k), group_sums(form_right, type_of_form, k)
    bf = partial(dm_bayes_factor, alpha=alpha)

    def nearest(points, fits, n):                     # (len(points), n) indices into fits
        n = min(n, len(fits))
        return NearestNeighbors(n_neighbors=n).fit(means[fits]).kneighbors(points, return_distance=False)

    movable = np.flatnonzero(forms[type_of_form] >= 2)
    fits = np.flatnonzero((forms >= 1) & (forms + 1 <= capacity))
    if not len(movable) or not len(fits):
        return empty, empty, empty, np.zeros(0)
    # A - f for every movable form: its context counts, projected mean and forms
    a_of = type_of_form[movable]
    rest_left, rest_right = type_left[a_of] - form_left[movable], type_right[a_of] - form_right[movable]
    rest_n = forms[a_of] - 1
    rest_mean = (forms[a_of][:, None] * means[a_of] - proj[movable]) / rest_n[:, None]
    # the join each A - f frees: the best C, and the second best (for a move whose B is that C)
    freed = np.zeros((len(movable), 2))
    freed_c = np.full((len(movable), 2), -1)
    for n in np.unique(rest_n):
        rows = np.flatnonzero(rest_n == n)
        room = np.flatnonzero((forms >= 1) & (forms <= capacity - n))
        if not len(room):
            continue
        cand = room[nearest(rest_mean[rows], room, k_nn + 1)]                           # (r, c)
        r = np.repeat(rows, cand.shape[1])
        c = cand.ravel()
        barred = (forms[a_of[r]] + forms[c] > capacity) & (c != a_of[r])
        g = (w_lm * (bf(rest_left[r], type_left[c]) + bf(rest_right[r], type_right[c]))
             + w_hom * model.log_odds(rest_mean[r], rest_n[r], means[c], forms[c]) - w_dup * np.log(k))
        g = np.where(barred & (g > 0), g, 0.0).reshape(cand.shape)
        order = np.argsort(-g, axis=1, kind="stable")[:, :2]
        for j in range(order.shape[1]):
            pick = order[:, j]
            gj = g[np.arange(len(rows)), pick]
            freed[rows, j] = gj
            freed_c[rows, j] = np.where(gj > 0, cand[np.arange(len(rows)), pick], -1)
    # the moves
    nb = nearest(proj[movable], fits, k_nn + 1)                                         # + 1: f's own type
    i = np.repeat(np.arange(len(movable)), nb.shape[1])
    b = fits[nb.ravel()]
    keep = b != a_of[i]
    i, b = i[keep], b[keep]
    f = movable[i]
    ctx = (bf(form_left[f], type_left[b]) + bf(form_right[f], type_right[b])
           - bf(form_left[f], rest_left[i]) - bf(form_right[f], rest_right[i]))
    one = np.ones(len(f))
    vis = (model.log_odds(proj[f], one, means[b], forms[b])
           - model.log_odds(proj[f], one, rest_mean[i], rest_n[i]))
    second = freed_c[i, 0] == b                        # B is the freed join's C: take the next best C
    c = np.where(second, freed_c[i, 1], freed_c[i, 0])
    return f, b, c, w_lm * ctx + w_hom * vis + np.where(second, freed[i, 1], freed[i, 0])


def split_gains(form_left: np.ndarray, form_right: np.ndarray, alpha: np.ndarray, proj: np.ndarray,
                type_of_form: np.ndarray, k: int, model: "TwoCovariance", capacity: int, w_lm: float,
                w_hom: float, w_dup: float, max_forms: int = 12) -> list[tuple[int, np.ndarray, float]]:
    """For each type of more forms than ``capacity`` (two signs in one type: a sign has one form per
    typeface) and at most ``max_forms``: its best bipartition (P, Q) and the gain of the split, the
    gain of joining P and Q as ``_join_forms`` scores it, negated:

        -(w_lm bf(P, Q) + w_hom lo(P, Q) - w_dup log K)

    over every bipartition (2^(n-1) - 1 of n forms). Arguments as ``form_move_gains``. Returns
    (type, the forms of P, gain) per such type."""
    forms = np.bincount(type_of_form, minlength=k)
    bf = partial(dm_bayes_factor, alpha=alpha)
    out = []
    for a in np.flatnonzero((forms > capacity) & (forms <= max_forms)):
        fs = np.flatnonzero(type_of_form == a)
        n = len(fs)
        bits = np.arange(2 ** (n - 1) - 1)[:, None] >> np.arange(n - 1) & 1       # Q: never empty
        in_p = np.c_[np.ones(len(bits), bool), bits.astype(bool)]                   # (S, n) P holds fs[0]
        in_q = ~in_p
        n_p, n_q = in_p.sum(1).astype(np.float64), in_q.sum(1).astype(np.float64)
        join = (w_lm * (bf(in_p @ form_left[fs], in_q @ form_left[fs]) + bf(in_p @ form_right[fs], in_q @ form_right[fs]))
                + w_hom * model.log_odds(in_p @ proj[fs] / n_p[:, None], n_p, in_q @ proj[fs] / n_q[:, None], n_q)
                - w_dup * np.log(k))
        best = int(np.argmin(join))
        out.append((int(a), fs[in_p[best]], float(-join[best])))
    return out


def record_round(history: list, k: int, merges: list, u: np.ndarray, v: np.ndarray, gain: np.ndarray,
                 ctx: FitContext) -> None:
    """One merge round's row of ``history`` (types after it, merges, the best and the accepted gain),
    logged to ``ctx.log_metrics`` at step = its round: the merge loop's and the form pass's rounds alike."""
    history.append({"round": len(history) + 1, "types": k - len(merges), "merges": len(merges),
                    "best_gain": float(gain.max()), "accepted_gain": float(sum(
                        gain[(u == a) & (v == b)][0] for a, b in merges))})
    if ctx.log_metrics:
        ctx.log_metrics({k_: v_ for k_, v_ in history[-1].items() if k_ != "round"}, len(history))


@register
class LMSignClusterer(Clusterer):
    name = "lm"
    needs_k = False
    PARAMS = params_of(LMConfig)       # every default lives in LMConfig, checked by models/params.py

    def __init__(self, preset: str | None = None, **params):
        super().__init__(preset, **params)
        self.cfg = LMConfig(**self.params)

    def hand_images(self, corpus: Corpus) -> tuple[np.ndarray, np.ndarray, bool]:
        """(images, image_index, clean): the images the visual side reads and the image of each token.
        A clean corpus (its sign images recur exactly: fewer distinct images than ``clean_share`` x
        tokens) keeps its distinct images. On a noisy one each text's slant is undone
        (``text_deslant``): the tokens' moment slants, their text's median less the corpus's, each
        token sheared by it (``text_shears``) -- one image per token, since one image may sit in
        texts of different slants."""
        cfg = self.cfg
        images, image_index = np.asarray(corpus.images), corpus.image_index()
        clean = len(images) <= cfg.clean_share * corpus.n_tokens
        if clean or cfg.text_deslant <= 0:
            return images, image_index, clean
        text_index = np.unique(corpus.tokens["text_id"].to_numpy(), return_inverse=True)[1]
        shear = text_shears(moment_slants(images)[image_index], text_index, cfg.text_deslant)
        return shear_glyphs(images[image_index], shear), np.arange(corpus.n_tokens), clean

    def features(self, corpus: Corpus, ctx: FitContext, fitted: tuple = (),
                 glyph_feats: np.ndarray | None = None,
                 hand: tuple | None = None) -> tuple[np.ndarray, list[np.ndarray], bool]:
        """The visual side: (x, texts, clean). x (n, D) is each token's feature with its hand
        removed, texts the token indices of each non-empty text, clean whether the corpus's sign
        images recur exactly (then it has no pair model). ``fitted``: the labellings of earlier fits,
        one encoder round each (``with_encoder``). ``glyph_feats``, ``hand``: ``glyph_features`` of
        the images and ``hand_images`` when already computed (``fit``'s self rounds: they do not change)."""
        cfg = self.cfg
        texts = [t for t in corpus.texts() if len(t)]
        text_index = np.unique(corpus.tokens["text_id"].to_numpy(), return_inverse=True)[1]
        images, image_index, clean = self.hand_images(corpus) if hand is None else hand
        feats = glyph_features(images, cfg, ctx.seed) if glyph_feats is None else glyph_feats
        if not clean and cfg.encoder_epochs:
            feats = with_encoder(feats, images, cfg, ctx, (image_index, texts, text_index), fitted)
        return text_centre(feats[image_index], text_index, cfg.text_centring), texts, clean   # (n, D)

    def validate(self) -> None:
        if not self.params["pair_ratios"]:
            raise UserError("lm.pair_ratios: [] is not allowed (expected at least one ratio, e.g. [0.8])")

    def fit(self, corpus: Corpus, ctx: FitContext) -> ClusterResult:
        t0 = time.time()
        images, image_index, _ = hand = self.hand_images(corpus)           # every round reads them
        glyph_feats = glyph_features(images, self.cfg, ctx.seed)          # (m, D), likewise
        x, texts, clean = self.features(corpus, ctx, glyph_feats=glyph_feats, hand=hand)
        if clean:
            return self.cluster(x, texts, clean, image_index, None, ctx, t0)
        rounds = self.cfg.self_rounds if self.cfg.encoder_epochs else 0      # no encoder: nothing to self-train
        quiet = dataclasses.replace(ctx, log_metrics=None)                  # merge rounds: the last fit's only
        result, symbols = self.select(x, texts, image_index, quiet if rounds else ctx, t0)
        fitted, ks = [], [result.info["k_found"]]
        for r in range(rounds):                          # self-training: the encoder learns the types found
            fitted.append(result.labels)
            x, _, _ = self.features(corpus, ctx, tuple(fitted), glyph_feats, hand)
            result, symbols = self.select(x, texts, image_index, ctx if r == rounds - 1 else quiet, t0)
            ks.append(result.info["k_found"])
        if rounds:
            result.info["self_training_k"] = ks
        if self.cfg.style_alignment:
            result = self.align_styles(result, x, texts)
        if self.cfg.splits:
            result = self.cut_types(result, x, texts, symbols, ctx.seed)
        return result

    def cut_types(self, result: ClusterResult, x: np.ndarray, texts: list[np.ndarray], symbols: np.ndarray,
                  seed: int) -> ClusterResult:
        """The fit with its types cut where ``split_types`` finds two signs in one, read on the
        neighbour ``symbols`` the last selection compared its candidates on (the final features';
        after the fit, not in each candidate: a cut raises the evidence the selection compares, so
        cuts inside would choose the candidate); the embedding follows the new types. info: k
        before and the cuts."""
        cfg = self.cfg
        z, cuts = split_types(result.labels, x, texts, symbols, cfg.select_beta, cfg.split_margin, cfg.split_avoid,
                              cfg.split_fdr, seed)
        k = int(z.max()) + 1
        info = dict(result.info, k_found=k, splits={"k_before": result.info["k_found"], "cuts": cuts})
        return ClusterResult(z, self._embedding(x, z, texts, k), info)

    def align_styles(self, result: ClusterResult, x: np.ndarray, texts: list[np.ndarray]) -> ClusterResult:
        """The fit with a minor style's own types joined to their decodings in the major style
        (models/style_alignment.py: it reads the labels and the texts only); the embedding follows
        the new types. info: k before, the texts' split (lambda2, minor texts) and the joins."""
        from signclust.models.style_alignment import align_styles      # it builds on this module's avoidance
        z, found = align_styles(result.labels, texts, self.cfg.style_p_min, self.cfg.avoid_c0)
        k = int(z.max()) + 1
        info = dict(result.info, k_found=k, style_alignment={
            "k_before": result.info["k_found"], "lambda2": found["lambda2"],
            "minor_texts": found["minor_texts"], "joined": found["joined"]})
        return ClusterResult(z, self._embedding(x, z, texts, k), info)

    def select(self, x: np.ndarray, texts: list[np.ndarray], image_index: np.ndarray, ctx: FitContext,
               t0: float) -> tuple[ClusterResult, np.ndarray]:
        """A noisy corpus: the ``candidates`` of ``pair_ratios``, and the one whose types best predict
        their neighbours' symbols (``neighbour_evidence``) is kept; the first wins a tie. The
        candidates' merge rounds are logged for the kept fit only. Returns the kept fit and the
        symbols (``evidence_symbols``, one per token) its evidence read."""
        before = time.time() - t0                       # features: every candidate's setup shares them
        graph = self.graph(x, ctx.seed)
        symbols = self.evidence_symbols(x, graph, ctx.seed)
        best, tried = None, []
        for ratio, result, evidence in self.candidates(x, texts, image_index, ctx, self.cfg.pair_ratios,
                                                       graph, symbols):
            tried.append({"pair_ratio": ratio, "k": result.info["k_found"], "evidence": evidence})
            if best is None or evidence > best[2]:
                best = (ratio, result, evidence)
        ratio, result, _ = best
        result.info["setup_s"] += before
        result.info.update(pair_ratio=ratio, selection=tried, seconds_fit=time.time() - t0)
        if ctx.log_metrics:
            for row in result.info["history"]:
                ctx.log_metrics({k: v for k, v in row.items() if k != "round"}, row["round"])
        return result, symbols

    def candidates(self, x: np.ndarray, texts: list[np.ndarray], image_index: np.ndarray, ctx: FitContext,
                   ratios: list[float], graph: tuple | None = None, symbols: np.ndarray | None = None):
        """Yields (ratio, fit, evidence) for each ratio test in ``ratios``, in that order: the fit with
        that ratio's pair model (its own micro-clusters and merge evidence; one kNN graph for all,
        no merge rounds logged) and ``neighbour_evidence`` of its types. A generator: ``select``
        holds two fits at a time, scripts/pair_ratio_sweep.py scores every one. ``graph`` and
        ``symbols`` (``graph``, ``evidence_symbols``) are drawn here unless given."""
        cfg = self.cfg
        graph = self.graph(x, ctx.seed) if graph is None else graph
        symbols = self.evidence_symbols(x, graph, ctx.seed) if symbols is None else symbols
        quiet = dataclasses.replace(ctx, log_metrics=None)
        for ratio in ratios:
            result = self.cluster(x, texts, False, image_index, corpus_pair_model(x, texts, ratio, ctx.seed),
                                  quiet, time.time(), graph, symbols)
            yield ratio, result, neighbour_evidence(result.labels, texts, symbols, cfg.select_beta)

    def evidence_symbols(self, x: np.ndarray, graph: tuple, seed: int) -> np.ndarray:
        """The fixed neighbour symbols ``neighbour_evidence`` reads (one per token): the graph's coarse
        context symbols when they are as many, else a Ward cut of their own."""
        cfg = self.cfg
        if cfg.select_symbols == cfg.coarse_contexts and graph[1] is not None:
            return graph[1]
        return coarse_symbols(x, cfg.select_symbols, cfg.max_linkage_tokens, seed)

    def graph(self, x: np.ndarray, seed: int) -> tuple[tuple, np.ndarray | None, np.ndarray | None]:
        """What a noisy corpus's fit reads besides the types, the same for every pair model: the
        token kNN graph's edges (i, j, d), the coarse context symbols (None when off) and the
        average-linkage tree that ``micro_clusters`` cuts (None above max_linkage_tokens)."""
        from scipy.cluster.hierarchy import linkage
        from sklearn.neighbors import NearestNeighbors
        cfg = self.cfg
        kn = min(cfg.candidates, len(x) - 1)
        dist, nb = NearestNeighbors(n_neighbors=kn + 1).fit(x).kneighbors(x)
        edges = (np.repeat(np.arange(len(x)), kn), nb[:, 1:].ravel(), dist[:, 1:].ravel())
        coarse = coarse_symbols(x, cfg.coarse_contexts, cfg.max_linkage_tokens, seed) if cfg.coarse_contexts else None
        tree = linkage(x, "average") if len(x) <= cfg.max_linkage_tokens else None
        return edges, coarse, tree

    def cluster(self, x: np.ndarray, texts: list[np.ndarray], clean: bool, image_index: np.ndarray,
                pair: PairModel | None, ctx: FitContext, t0: float | None = None,
                graph: tuple | None = None, symbols: np.ndarray | None = None) -> ClusterResult:
        """The types from the visual side (``features``) and a pair model: micro-clusters, then the
        merges. ``fit`` calls it once with no pair model on a clean corpus; ``select`` passes each
        candidate pair model and the ``graph`` they share (unused without a pair model); a diagnosis
        may pass another model (scripts/pair_model_calibration.py passes the true pairs' fit).
        ``symbols``: ``evidence_symbols`` when already drawn (``candidates``), for ``path_evidence``."""
        cfg, t0 = self.cfg, time.time() if t0 is None else t0
        coarse = tree = None
        if pair is not None:
            graph = graph if graph is not None else self.graph(x, ctx.seed)
            self.edges, coarse, tree = graph
            if cfg.path_evidence and symbols is None:
                symbols = self.evidence_symbols(x, graph, ctx.seed)
        path = {} if pair is not None and cfg.path_evidence else None
        z = micro_clusters(x, image_index, clean, pair, cfg, ctx.seed, tree)
        k0 = int(z.max()) + 1
        setup_s = time.time() - t0
        history = []
        for refit in range(cfg.refits + 1 if pair is not None else 1):    # no pair model: nothing to refit
            if refit:
                new = refit_pair_model(x, np.unique(z, return_inverse=True)[1], texts, ctx.seed)
                if new is None:
                    break
                pair = new
            z = self._merge(z, x, texts, pair, coarse, history, ctx, path=path, symbols=symbols)
        form_info = {} if path is None else {"merge_path": path}
        if clean and cfg.join_forms:
            z, form_info = self._forms_and_merges(z, x, texts, image_index, history, ctx)
        z = np.unique(z, return_inverse=True)[1]
        k = int(z.max()) + 1
        embedding = self._embedding(x, z, texts, k)
        info = {"k_found": k, "micro_clusters": k0, "rounds": len(history), "clean_corpus": bool(clean),
                "pair_model": dataclasses.asdict(pair) if pair else None, "setup_s": setup_s,
                "seconds_fit": time.time() - t0, "history": history, **form_info}
        return ClusterResult(z, embedding, info)

    def _merge(self, z, x, texts, pair, coarse, history, ctx, forms=None, path=None, symbols=None):
        """Merge rounds while the best disjoint pairs gain. ``forms`` (a clean corpus, after
        ``_join_forms``): (form of each token, capacity), and no merge may give a type more forms.
        ``path`` (a dict, with ``symbols``; ``path_evidence``): every state from the start to the end
        is scored by ``neighbour_evidence``, and the best is returned instead of the end where it
        gains more than ``path_margin`` nats over it (the merges gain on their own pair terms, which
        can keep gaining where the types have stopped predicting their neighbours: japanese_hands,
        hundreds of rare signs, whose visually nearest types are other signs); ``path`` gets the
        rounds, the kept round and the evidence of both ends."""
        cfg = self.cfg
        pairs = text_pairs(x, texts, pair) if pair is not None else None     # the same in every round

        def evidence(labels: np.ndarray) -> float:
            return neighbour_evidence(np.unique(labels, return_inverse=True)[1], texts, symbols, cfg.select_beta)
        states = [(evidence(z), z)] if path is not None else None             # (evidence, labels) per state
        for rnd in range(cfg.max_rounds):
            z = np.unique(z, return_inverse=True)[1]
            k = int(z.max()) + 1
            if k < 2:
                break
            left, right = context_counts(z, texts, k)                                      # (k, k+1)
            alpha = context_prior(z, len(texts), k, cfg.context_beta)
            size = np.bincount(z, minlength=k).astype(np.float64)
            cen = group_sums(x, z, k) / size[:, None]                                     # (k, D)
            u, v, rank, ratio = candidate_pairs(cen, left, right, cfg.candidates, by_context=pair is None)
            if forms is not None:
                n_forms = forms_per_type(z, forms[0], k)                                   # (k,)
                room = n_forms[u] + n_forms[v] <= forms[1]
                u, v, rank, ratio = u[room], v[room], rank[room], ratio[room]
                if not len(u):
                    break
            prior = cfg.w_dup * dup_prior(rank, cfg.rank_c0)
            visual = prior
            if pair is None:
                visual = visual + cfg.match_bonus * (ratio < cfg.match_ratio)
            else:
                same_hand = np.asarray(within_text_evidence(x, z, k, texts, pair, cfg.same_text, pairs)[u, v]).ravel()
                link = np.asarray(nearest_link(self.edges, z, k)[u, v]).ravel()
                d_min = 1.0 / np.maximum(link, 1e-12) - 1.0
                # no link between two types: no link evidence (-inf, not w_hom x -inf: NaN at w_hom 0)
                by_link = np.where(link > 0, cfg.w_hom * pair.log_odds(d_min) - cfg.link_c0, -np.inf)
                visual = np.maximum(visual, by_link)
                if cfg.vote != "none":       # or the prior plus where the small type's kNN edges land
                    by_vote = knn_vote(self.edges, z, k, u, v, cfg.vote)
                    # no vote (near's -inf) stays -inf, not w_hom x -inf: NaN at w_hom 0
                    voted = np.isfinite(by_vote)
                    by_vote = np.where(voted, prior + cfg.w_hom * np.where(voted, by_vote, 0.0), -np.inf)
                    visual = np.maximum(visual, by_vote)
                visual = visual + cfg.w_hom * same_hand
            d_lm = lm_gain(left, right, alpha, u, v)
            if coarse is not None:
                # a sign split by hand: its fragments avoid each other's texts, and their neighbours
                # are split by hand too, so only contexts over hand-invariant symbols can join them
                k_c = int(coarse.max()) + 1
                c_left, c_right = context_counts(z, texts, k, coarse, k_c)                 # (k, k_c+1)
                d_coarse = lm_gain(c_left, c_right, context_prior(coarse, len(texts), k_c, cfg.context_beta), u, v)
                split_by_hand = avoidance(z, k, texts, u, v) < -cfg.avoid_c0
                d_lm = np.where(split_by_hand, np.maximum(d_lm, d_coarse), d_lm)
            gain = cfg.w_lm * d_lm + visual
            if pair is not None and cfg.seat_odds:
                # a lone token: does the corpus's rate of new types make it a sign of its own?
                gain = gain + crp_seat_odds(size, u, v)
            merges = disjoint_best(u, v, gain, max(1, int(cfg.batch * k)))
            if not merges:
                break
            z = apply_merges(z, merges, k)
            record_round(history, k, merges, u, v, gain, ctx)
            if states is not None:
                states.append((evidence(z), z))
        if states is None:
            return z
        best = int(np.argmax([e for e, _ in states]))                      # the first of equals
        kept = best if states[best][0] > states[-1][0] + cfg.path_margin else len(states) - 1
        path.update(rounds=len(states) - 1, kept_round=kept, evidence_start=states[0][0],
                    evidence_end=states[-1][0], evidence_kept=states[kept][0])
        return states[kept][1]

    def _forms_and_merges(self, z, x, texts, image_index, history, ctx) -> tuple[np.ndarray, dict]:
        """A clean corpus, after the merges: ``_move_forms``, ``_split_forms``, ``_join_forms``, then
        the merges again, in turns until none moves a type or a form. A join of two forms changes the contexts of every
        type beside them, so a merge the first pass stopped short of may gain now (cyrillic_free: the
        italic and upright types of a sign of 32 tokens, +3.6 nats after the joins). The merges then
        keep within the capacity, as the joins do. info: ``_join_forms``' (merges summed over the
        turns), the form moves, the splits and the turns."""
        form_of_token = np.unique(image_index, return_inverse=True)[1]
        moved_once = np.zeros(int(form_of_token.max()) + 1, bool)       # each form moves once at most
        info, merges, moves, splits, turns = {}, 0, 0, 0, 0
        while True:
            k_before = len(np.unique(z))
            z, moved = self._move_forms(z, x, texts, image_index, moved_once)
            moves += moved
            z, split = self._split_forms(z, x, texts, image_index)
            splits += split
            z, info = self._join_forms(z, x, texts, image_index, history, ctx)
            merges += info["form_merges"]
            turns += 1
            if not info["form_capacity"] or info["form_capacity"] < 2 or turns >= self.cfg.max_rounds:
                break                                            # no form model: the joins did nothing
            z = self._merge(z, x, texts, None, None, history, ctx, (form_of_token, info["form_capacity"]))
            if len(np.unique(z)) == k_before and not moved and not split:
                break
        return z, dict(info, form_merges=merges, form_moves=moves, form_splits=splits, form_turns=turns)

    def _move_forms(self, z, x, texts, image_index, moved_once: np.ndarray | None = None) -> tuple[np.ndarray, int]:
        """A clean corpus: rounds of form moves (``form_move_gains``), the best move of each form, each
        type in at most one move a round, while one gains. A sign's type can hold a form of another
        sign that looks like it (georgian_free: the serif GAN among MAN's forms), and then the
        capacity bars MAN's own third form; moving the stray form to its sign's type frees the room.
        The two-covariance model is fitted on the types as they enter. ``moved_once`` (m,) marks the
        forms that moved before (in an earlier turn) and is updated: a form moves once at most, so the
        moves end though the contexts they are read in change under them. Returns the labels and the moves."""
        z, state = self._form_model(z, x, texts, image_index)
        if state is None:
            return z, 0
        cfg, (form_of_token, type_of_form, capacity, model, proj, alpha) = self.cfg, state
        m, k = len(type_of_form), int(z.max()) + 1
        moved_once = np.zeros(m, bool) if moved_once is None else moved_once
        moves = 0
        for _ in range(cfg.max_rounds):
            # each form's neighbours read over the current types; K stays, so alpha does too
            form_left, form_right = context_counts(form_of_token, texts, m, z, k)       # (m, k+1)
            f, b, c, gain = form_move_gains(form_left, form_right, alpha, proj, type_of_form, k, model,
                                            capacity, cfg.candidates, cfg.w_lm, cfg.w_hom, cfg.w_dup)
            chosen, used = [], set()
            for i in np.argsort(-gain, kind="stable"):
                if gain[i] <= 0:
                    break
                if moved_once[f[i]]:
                    continue
                touched = {int(type_of_form[f[i]]), int(b[i])} | ({int(c[i])} if c[i] >= 0 else set())
                if not touched & used:
                    used |= touched
                    chosen.append((int(f[i]), int(b[i]), int(c[i])))
            if not chosen:
                break
            for f_, b_, c_ in chosen:
                a_ = type_of_form[f_]
                type_of_form[f_] = b_
                moved_once[f_] = True
                if c_ >= 0:
                    type_of_form[type_of_form == c_] = a_          # the join the move freed
            z = np.unique(type_of_form[form_of_token], return_inverse=True)[1]
            k = int(z.max()) + 1
            type_of_form[form_of_token] = z
            alpha = context_prior(z, len(texts), k, cfg.context_beta)
            moves += len(chosen)
        return z, moves

    def _form_model(self, z, x, texts, image_index):
        """A clean corpus's forms: the labels ``z`` made compact and (form of each token, type of each
        form, the capacity, the two-covariance model, the forms' projected features (m, D), the
        context prior), or None where a form is split between types or no model can be fitted. The
        model learns from the types within the capacity: a type over it holds a stray form, which
        would teach that a typeface may turn one sign into another."""
        z = np.unique(z, return_inverse=True)[1]
        form_of_token = np.unique(image_index, return_inverse=True)[1]
        m, k = int(form_of_token.max()) + 1, int(z.max()) + 1
        type_of_form = np.zeros(m, np.int64)
        type_of_form[form_of_token] = z
        if not np.array_equal(type_of_form[form_of_token], z):           # a form split between types
            return z, None
        capacity = form_capacity(np.bincount(type_of_form, minlength=k), np.bincount(z, minlength=k))
        feats = group_sums(x, form_of_token, m) / np.bincount(form_of_token, minlength=m)[:, None]   # (m, D)
        within = np.bincount(type_of_form, minlength=k)[type_of_form] <= capacity
        model = TwoCovariance.fit(feats[within], type_of_form[within], self.cfg.form_shrink) if capacity > 1 else None
        if model is None:
            return z, None
        alpha = context_prior(z, len(texts), k, self.cfg.context_beta)
        return z, (form_of_token, type_of_form, capacity, model, model.project(feats), alpha)

    def _split_forms(self, z, x, texts, image_index) -> tuple[np.ndarray, int]:
        """A clean corpus: each type of more forms than the capacity splits in two where its best
        bipartition gains (``split_gains``). After the moves, what is left over the capacity is two
        signs with no type of their own to go to (devanagari_free: the vowel signs E and II, two
        forms each, in one type). Returns the labels and the splits."""
        z, state = self._form_model(z, x, texts, image_index)
        if state is None:
            return z, 0
        form_of_token, type_of_form, capacity, model, proj, alpha = state
        k, cfg = int(z.max()) + 1, self.cfg
        form_left, form_right = context_counts(form_of_token, texts, len(type_of_form), z, k)   # (m, k+1)
        splits = 0
        for _, part, gain in split_gains(form_left, form_right, alpha, proj, type_of_form, k, model, capacity,
                                         cfg.w_lm, cfg.w_hom, cfg.w_dup):
            if gain > 0:                              # the types are disjoint: every split applies
                type_of_form[part] = k + splits
                splits += 1
        return np.unique(type_of_form[form_of_token], return_inverse=True)[1], splits

    def _join_forms(self, z, x, texts, image_index, history, ctx) -> tuple[np.ndarray, dict]:
        """A clean corpus, after the merges: the typeface forms of a rare sign, seen too few times for
        context to join them, stay types of their own. Each distinct image is one form; the types
        that already hold several forms teach what a typeface changes (``TwoCovariance``), and no
        type takes more forms than a frequent sign shows (``form_capacity``: a sign has one form per
        typeface). Merge rounds over ``form_pairs``, the best disjoint pairs each round, while

            w_lm dL_LM(u, v) + w_hom log-odds(u, v one sign) - w_dup log K [+ occupancy(u, v)]

        is positive: the prior odds of picking one type out of K (``dup_prior`` at rank K, without
        its ``rank_c0``); with ``form_occupancy``, occupancy(u, v) = ``FormOccupancy.merge_gain`` of the
        types' tokens and forms, the model fitted on the round's types (``occupancy_model``). Only the
        joins read it: the merges' visual term is the rank prior alone, and with it there the occupancy
        completed types with look-alikes (README 'How many forms a type shows'). Where the types do not keep each form whole (micro-clusters from k-means,
        above ``max_types`` distinct images) a type is not a set of forms and the pass is skipped.
        Returns the labels and what the pass found (capacity, the model's degrees of freedom, merges)."""
        cfg = self.cfg
        form_of_token = np.unique(image_index, return_inverse=True)[1]
        m = int(form_of_token.max()) + 1
        feats = group_sums(x, form_of_token, m) / np.bincount(form_of_token, minlength=m)[:, None]   # (m, D)
        z = np.unique(z, return_inverse=True)[1]
        type_of_form = np.zeros(m, np.int64)
        type_of_form[form_of_token] = z
        if not np.array_equal(type_of_form[form_of_token], z):           # a form split between types
            return z, {"form_capacity": None, "form_model_dof": None, "form_merges": 0}
        k = int(z.max()) + 1
        capacity = form_capacity(np.bincount(type_of_form, minlength=k), np.bincount(z, minlength=k))
        model = TwoCovariance.fit(feats, type_of_form, cfg.form_shrink) if capacity > 1 else None
        info = {"form_capacity": capacity, "form_model_dof": model.dof if model else None, "form_merges": 0}
        if model is None:
            return z, info
        proj = model.project(feats)                                                        # (m, D)
        for _ in range(cfg.max_rounds):
            z = np.unique(z, return_inverse=True)[1]
            k = int(z.max()) + 1
            type_of_form[form_of_token] = z
            forms = np.bincount(type_of_form, minlength=k).astype(np.float64)             # (k,)
            means = group_sums(proj, type_of_form, k) / forms[:, None]                     # (k, D)
            u, v = form_pairs(means, forms, capacity, cfg.candidates)
            if not len(u):
                break
            left, right = context_counts(z, texts, k)
            alpha = context_prior(z, len(texts), k, cfg.context_beta)
            gain = (cfg.w_lm * lm_gain(left, right, alpha, u, v)
                    + cfg.w_hom * model.log_odds(means[u], forms[u], means[v], forms[v]) - cfg.w_dup * np.log(k))
            occupancy = occupancy_model(z, form_of_token, capacity) if cfg.form_occupancy else None
            if occupancy is not None:
                gain = gain + occupancy.merge_gain(np.bincount(z, minlength=k).astype(np.float64),
                                                   forms.astype(np.int64), u, v)
            merges = disjoint_best(u, v, gain)
            if not merges:
                break
            z = apply_merges(z, merges, k)
            info["form_merges"] += len(merges)
            record_round(history, k, merges, u, v, gain, ctx)
        return z, info

    @staticmethod
    def _embedding(x: np.ndarray, z: np.ndarray, texts: list[np.ndarray], k: int, dims: int = 16) -> np.ndarray:
        """Each token's visual feature followed by its type's context profile (left and right
        neighbour distributions, reduced by SVD), both blocks at unit total variance."""
        left, right = context_counts(z, texts, k)
        prof = np.concatenate([left, right], axis=1)
        prof /= prof.sum(1, keepdims=True) + 1e-12
        dims = max(1, min(dims, k - 1, prof.shape[1]))
        u, s, _ = np.linalg.svd(prof - prof.mean(0), full_matrices=False)
        ctx = (u[:, :dims] * s[:dims])[z]
        blocks = [x, ctx]
        return np.concatenate([unit_variance(b) for b in blocks], axis=1).astype(np.float32)
