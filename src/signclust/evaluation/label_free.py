"""Label-free scoring of a clustering: usable on an undeciphered script (no gold labels).

The tune stage's ``--objective unsupervised`` and every trial's recorded ``unsupervised`` score:

    U = -(a * CE_heldout / log(n) + b * inhomogeneity)

``heldout_bigram_ce``: cross-entropy of held-out texts' type sequences under a bigram model of the
other texts (a good type inventory makes the script's sign sequences predictable);
``visual_inhomogeneity``: how far tokens lie from their type's mean glyph, relative to the corpus
mean glyph. Both computed from the assignment alone, the same for every method. How far U can be
trusted to rank configurations is measured per study (Spearman with V-measure, in the tune report).

``context_evidence``: lm's selection score (``neighbour_evidence``: how well the types predict their
neighbours' symbols) over symbols no configuration changes (``glyph_symbols``), optionally less the
same with every text shuffled (``shuffled_evidence``). Not part of U; every trial records the
controlled form as ``context_evidence``, and ``--objective context`` tunes by it (how each ranks
trials against V: scripts/label_free_rho.py).
"""
from __future__ import annotations

import math

import numpy as np

from signclust.data.corpus import Corpus


class CorpusData:
    """What scoring needs, computed once per corpus: gold labels, texts, normalised glyph pixels."""

    def __init__(self, corpus: Corpus, name: str):
        from signclust.data.glyphs import normalize_glyphs
        self.corpus, self.name = corpus, name
        self.gold = corpus.labels() if corpus.has_labels else None
        self.texts = [t for t in corpus.texts() if len(t)]
        g = normalize_glyphs(corpus.images)
        self.glyphs = g.reshape(len(g), -1).astype(np.float32) / 255.0     # per image
        self.image_index = corpus.image_index()
        self._symbols: dict[int, np.ndarray] = {}

    def context_symbols(self, n: int) -> np.ndarray:
        """``glyph_symbols`` of this corpus into ``n`` symbols, cut once and kept."""
        if n not in self._symbols:
            self._symbols[n] = glyph_symbols(self, n)
        return self._symbols[n]

    @property
    def k_true(self) -> int | None:
        return None if self.gold is None else int(len(np.unique(self.gold)))


def heldout_bigram_ce(labels: np.ndarray, texts: list[np.ndarray], folds: int = 5, alpha: float = 0.1,
                      seed: int = 0) -> float:
    """Cross-entropy (nats per symbol) of each held-out text's type sequence under an add-alpha
    bigram model fitted on the other texts (k-fold by text; a text boundary symbol starts and ends
    every text). With one text only there is nothing to hold out: scored in-sample."""
    labels = np.unique(np.asarray(labels), return_inverse=True)[1]
    k = int(labels.max()) + 1 if len(labels) else 1
    boundary = k
    vocab = k + 1
    folds = max(1, min(int(folds), len(texts)))
    rank = np.empty(len(texts), dtype=np.int64)
    rank[np.random.default_rng(seed).permutation(len(texts))] = np.arange(len(texts))
    prev, nxt, fold = [], [], []
    for i, t in enumerate(texts):
        seq = np.concatenate([[boundary], labels[t], [boundary]])
        prev.append(seq[:-1])
        nxt.append(seq[1:])
        fold.append(np.full(len(seq) - 1, rank[i] % folds))
    prev, nxt, fold = np.concatenate(prev), np.concatenate(nxt), np.concatenate(fold)
    code = prev * vocab + nxt
    total = 0.0
    for f in range(folds):
        test = fold == f
        train = ~test if folds > 1 else np.ones_like(test)
        keys, counts = np.unique(code[train], return_counts=True)
        row_tot = np.bincount(prev[train], minlength=vocab)
        pos = np.searchsorted(keys, code[test])
        pos = np.minimum(pos, max(len(keys) - 1, 0))
        c = np.where((len(keys) > 0) & (keys[pos] == code[test]), counts[pos], 0) if len(keys) else \
            np.zeros(int(test.sum()))
        p = (c + alpha) / (row_tot[prev[test]] + alpha * vocab)
        total += float(-np.log(p).sum())
    return total / len(code)


def visual_inhomogeneity(labels: np.ndarray, glyphs: np.ndarray, image_index: np.ndarray,
                         chunk: int = 20000) -> float:
    """Mean L1 distance of a token's normalised glyph to its type's mean glyph, divided by the same
    to the corpus mean glyph: 1 for one type, 0 when every type is a set of identical glyphs."""
    labels = np.unique(np.asarray(labels), return_inverse=True)[1]
    k = int(labels.max()) + 1
    sums = np.zeros((k, glyphs.shape[1]), dtype=np.float64)
    np.add.at(sums, labels, glyphs[image_index])
    cent = sums / np.bincount(labels, minlength=k)[:, None]
    mean = sums.sum(0) / len(labels)
    within = across = 0.0
    for start in range(0, len(labels), chunk):
        x = glyphs[image_index[start:start + chunk]]
        within += float(np.abs(x - cent[labels[start:start + chunk]]).sum())
        across += float(np.abs(x - mean).sum())
    return within / across if across > 0 else 0.0


def unsupervised_score(labels: np.ndarray, data: CorpusData, ucfg: dict) -> dict:
    """U = -(a * CE_heldout / log(n) + b * inhomogeneity), both terms in [0, ~1]; and, beside it, the
    controlled ``context_evidence`` over ``ucfg["context_symbols"]`` (default 10) glyph symbols.

    A clustering that lumps everything is perfectly predictable (CE 0) and maximally
    inhomogeneous (1); one that splits every token is homogeneous (0) and unpredictable
    (CE ~ log n). The weights a, b are ``tune.unsupervised.lm_weight``/``hom_weight``.
    Measured on cypriot Ward cuts from K=5 to 800 this sum is nearly flat (-1.10 .. -1.16) while V
    rises from 0.42 to 0.70: a weak signal; the tune report's Spearman correlation says how it
    ranks real trials.
    """
    n = len(labels)
    ce = heldout_bigram_ce(labels, data.texts, int(ucfg.get("folds", 5)), float(ucfg.get("alpha", 0.1)))
    hom = visual_inhomogeneity(labels, data.glyphs, data.image_index)
    ce_norm = ce / math.log(max(n, 2))
    u = -(float(ucfg.get("lm_weight", 1.0)) * ce_norm + float(ucfg.get("hom_weight", 1.0)) * hom)
    symbols = data.context_symbols(int(ucfg.get("context_symbols", 10)))
    return {"unsupervised": u, "heldout_ce": ce, "hom_rel": hom,
            "context_evidence": context_evidence(labels, data.texts, symbols, controlled=True)}


# --------------------------------------------------------------------------- context evidence
# lm's own selection score (models/lm_clusterer.neighbour_evidence) read over symbols that no
# configuration changes, so that any labelling of a corpus can be scored: scripts/label_free_rho.py
# measures how it ranks tuning trials, scripts/pair_ratio_sweep.py how its controlled form chooses fits.
CONTROL_SHUFFLES = 5


def glyph_symbols(data: CorpusData, n: int, seed: int = 0, dims: int = 32) -> np.ndarray:
    """(n_tokens,) ``n`` clusters of the PCA of the tokens' normalised glyphs, cut as lm cuts its
    context symbols (``coarse_symbols``: Ward, k-means above lm's ``max_linkage_tokens``): symbols
    that are the same for every configuration of every method."""
    from sklearn.decomposition import PCA

    from signclust.models.lm_clusterer import LMConfig, coarse_symbols
    glyphs = data.glyphs[data.image_index]                                      # (n_tokens, pixels)
    dims = max(1, min(dims, glyphs.shape[1], len(glyphs) - 1))
    return coarse_symbols(PCA(dims, random_state=seed).fit_transform(glyphs), n, LMConfig().max_linkage_tokens, seed)


def shuffled_evidence(z: np.ndarray, texts: list[np.ndarray], symbols: np.ndarray, beta: float, seed: int,
                      shuffles: int = CONTROL_SHUFFLES) -> float:
    """``neighbour_evidence`` of the types z with every text's tokens in a random order, averaged
    over ``shuffles`` orders (the same orders for every z of one seed): what the types predict about
    their text's other tokens that is not sequential context (a hand's style, a text's topic)."""
    from signclust.models.lm_clusterer import neighbour_evidence
    rng = np.random.default_rng(seed)
    orders = [[rng.permutation(t) for t in texts] for _ in range(shuffles)]
    return float(np.mean([neighbour_evidence(z, order, symbols, beta) for order in orders]))


def context_evidence(labels: np.ndarray, texts: list[np.ndarray], symbols: np.ndarray, beta: float = 1.0,
                     controlled: bool = False, seed: int = 0) -> float:
    """How well the types ``labels`` predict their left and right neighbours' ``symbols``, in nats per
    token (``neighbour_evidence``; higher is better). ``controlled``: less the same with every text
    shuffled (``shuffled_evidence``), i.e. sequential context only."""
    from signclust.models.lm_clusterer import neighbour_evidence
    z = np.unique(np.asarray(labels), return_inverse=True)[1]
    evidence = neighbour_evidence(z, texts, symbols, beta)
    if controlled:
        evidence -= shuffled_evidence(z, texts, symbols, beta, seed)
    return evidence / len(z)
