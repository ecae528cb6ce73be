"""Clustering metrics: scikit-learn and scipy do the arithmetic, we only assemble them."""
from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn import metrics as skm
from sklearn.cluster import AgglomerativeClustering

FIXED_K_OFFSETS = (-15, -10, -5, 0, 5, 10, 15)


def clustering_accuracy(gold: np.ndarray, pred: np.ndarray) -> float:
    """Best one-to-one map of predicted to gold clusters (Hungarian; rectangular when K differs)."""
    cm = skm.confusion_matrix(gold, pred) if len(gold) else np.zeros((0, 0))
    # confusion_matrix squares the label space; keep only rows/cols that occur
    g_vals, p_vals = np.unique(gold), np.unique(pred)
    all_vals = np.unique(np.concatenate([gold, pred]))
    cm = cm[np.searchsorted(all_vals, g_vals)][:, np.searchsorted(all_vals, p_vals)]
    rows, cols = linear_sum_assignment(cm, maximize=True)
    return float(cm[rows, cols].sum() / len(gold))


def purity(gold: np.ndarray, pred: np.ndarray) -> float:
    cm = skm.cluster.contingency_matrix(gold, pred)
    return float(cm.max(axis=0).sum() / cm.sum())


def score(gold: np.ndarray, pred: np.ndarray) -> dict:
    gold = np.asarray(gold)
    pred = np.asarray(pred)
    h, c, v = skm.homogeneity_completeness_v_measure(gold, pred)
    return {
        "v_measure": float(v),
        "homogeneity": float(h),
        "completeness": float(c),
        "nmi": float(skm.normalized_mutual_info_score(gold, pred)),
        "ari": float(skm.adjusted_rand_score(gold, pred)),
        "acc": clustering_accuracy(gold, pred),
        "purity": purity(gold, pred),
        "k_found": int(len(np.unique(pred))),
        "k_true": int(len(np.unique(gold))),
    }


def ward_labels(embedding: np.ndarray, k: int) -> np.ndarray:
    return AgglomerativeClustering(n_clusters=k, linkage="ward").fit_predict(embedding)


def fixed_k_scores(gold: np.ndarray, embedding: np.ndarray,
                   offsets=FIXED_K_OFFSETS) -> dict:
    """Born et al. (2023) protocol: Ward on the learned representation at K_true + offsets.

    Builds the Ward tree once and cuts it at each K (same result as refitting per K).
    """
    from scipy.cluster.hierarchy import cut_tree, ward
    k_true = len(np.unique(gold))
    n = len(gold)
    ks = sorted({min(max(2, k_true + o), n) for o in offsets})
    tree = ward(np.asarray(embedding, dtype=np.float64))
    labels_by_k = {n: np.arange(n)} if n in ks else {}
    # K = n (every token alone) is not asked of cut_tree: scipy 1.17 returns all zeros for it
    # unless it is the first K requested (tests/test_references.py)
    below = [k for k in ks if k < n]
    if below:
        cuts = cut_tree(tree, n_clusters=below)
        labels_by_k.update({k: cuts[:, col] for col, k in enumerate(below)})
    per_k = {}
    for k in ks:
        per_k[k] = float(skm.v_measure_score(gold, labels_by_k[k]))
    return {
        "fixed_k_v_measure": float(np.mean(list(per_k.values()))),
        "fixed_k_v_at_ktrue": per_k[min(max(2, k_true), n)],
        "fixed_k_per_k": {str(k): v for k, v in per_k.items()},
    }
