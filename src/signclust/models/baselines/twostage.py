"""Two-stage unsupervised classification (Han et al. 2020, seed 003).

Stage 1, Super-AND embedding: a CNN maps each image to an L2-normalised vector v; a memory
bank holds one (momentum-averaged) vector per token, and p_i^j = softmax_j(v_i . m_j / T).
Three losses on two augmented views of each batch:
- AND: tokens start as their own class (-log p_i^i); from round 1 on, the anchors (the
  lowest-entropy tokens, a growing fraction select_rate x round) also count their nearest
  neighbour in the memory as their class: -log(p_i^i + sum_{j in N(i)} p_i^j);
- UE (unification entropy): entropy of p_i over the *other* tokens, weight w(t) growing
  from 0 in steps within each round, pulls tokens towards few neighbours;
- AUG: in-batch instance discrimination between the two views (the other view is the
  positive, all other views in the batch negatives): -log p_pos - sum log(1 - p_neg).
Stage 2: the stage-1 encoder keeps training under the IIC mutual-information loss between
the class distributions of the two views, from a normalised-FC head
(softmax(v . W_n / tau_c), W_n the normalised random weight), plus lambda x the
consistency-preserving loss (the AUG loss again, on the embedding). Several sub-heads train
together as in the authors' code; the assignment is the argmax of the sub-head with the lowest
IIC loss over the last epoch, the embedding the final v. As in the authors' code (and
supplementary B) the Norm-FC weights are random and fixed, and normalised per feature row
(``lib/normalize.py`` on the (dim, K) weight), not per class column as Eq. 13 writes: see
``NormFCHead``. Supplementary B also says IIC's auxiliary over-clustering heads were left
out, so there are none here.

Differences from the authors' code, kept small: a small CNN instead of ResNet-18 with a
Sobel branch; memory initialised from the untrained network's embedding rather than noise;
each token's memory slot updated with the mean of its two views; stage-2 lr 0.1 instead of
0.01 (CPU-sized epochs); tau_c scaled by sqrt(10 / K) (``head_tau``), so that a head of K sign
classes has the logit scale of the released K = 10 run (at K = 10 it is the released 0.1).
"""
from __future__ import annotations

import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from signclust.data.corpus import Corpus
from signclust.errors import UserError
from signclust.models.base import ClusterResult, FitContext, register
from signclust.models.baselines._nets import (Baseline, GlyphAugment, GlyphCNN, embed,
                                              epoch_bar, fit_setup, images_to_tensor,
                                              log_epoch, require_k, shuffled_batches)
from signclust.models.checkpoint import FitCheckpoint, capture_rng, restore_rng
from signclust.models.params import Param


# --------------------------------------------------------------------------- losses
def instance_pair_loss(v: torch.Tensor, tau: float) -> torch.Tensor:
    """AUG loss of Super-AND = consistency-preserving loss of stage 2.

    ``v``: (2B, d) normalised features, rows [0, B) view 1 and [B, 2B) view 2 of the same
    images. For each row i, p_i^j = exp(v_i.v_j/tau) / sum_{k != i} exp(v_i.v_k/tau); the
    other view is the positive. Loss = mean_i [-log p_i^pos - sum_{j != i, pos} log(1 - p_i^j)].
    As in the authors' code the right-hand side of the products is detached (it acts as
    the fixed "class weights" each row is classified against).
    """
    n = v.shape[0]
    b = n // 2
    sim = v @ v.detach().t() / tau
    self_mask = torch.eye(n, dtype=torch.bool, device=v.device)
    sim = sim.masked_fill(self_mask, float("-inf"))
    log_p = sim - torch.logsumexp(sim, dim=1, keepdim=True)
    pos = torch.cat([torch.arange(b, n), torch.arange(0, b)]).to(v.device)
    log_p_pos = log_p.gather(1, pos[:, None])[:, 0]
    neg_mask = ~self_mask
    neg_mask[torch.arange(n, device=v.device), pos] = False
    p = log_p.exp()
    log_not = torch.log1p(-p.clamp(max=1 - 1e-6))
    return -(log_p_pos + (log_not * neg_mask).sum(1)).mean()


def iic_loss(y1: torch.Tensor, y2: torch.Tensor, eps: float = sys.float_info.epsilon) -> torch.Tensor:
    """IIC: -I(y, y') from the symmetrised joint P = (1/B) sum_i y_i y'_i^T over a batch
    (the seed's L_assign); minimising it spreads tokens over classes and makes the two
    views agree."""
    p = (y1.unsqueeze(2) * y2.unsqueeze(1)).sum(0)
    p = (p + p.t()) / 2
    p = p / p.sum()
    pi = p.sum(1, keepdim=True).expand_as(p)
    pj = p.sum(0, keepdim=True).expand_as(p)
    p, pi, pj = p.clamp(min=eps), pi.clamp(min=eps), pj.clamp(min=eps)
    return -(p * (p.log() - pi.log() - pj.log())).sum()


class NormFCHead(nn.Module):
    """Norm-FC head: softmax(v . W_n / tau_c) with W (dim, n_classes) randomly initialised.

    ``norm="row"`` (the default) is the authors' released code: ``lib/normalize.Normalize(2)``
    applied to the (dim, n_classes) weight divides by the norm over dim 1, i.e. each *feature
    row* is unit-norm across the classes, so a class column has norm about sqrt(dim / n_classes)
    and the logits are sharper than the paper's Eq. 13 by that factor (at the paper's K = 10,
    dim = 128: 3.6x). ``norm="column"`` is Eq. 13's text, w_j / |w_j| (a cosine classifier).
    ``trainable=False`` (the default, released code and supplementary B: "weights in Norm-FC are
    randomly initialized, and then fixed during training") freezes the prototypes.
    """

    def __init__(self, dim: int, n_classes: int, tau: float, gen: torch.Generator,
                 norm: str = "row", trainable: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim, n_classes, generator=gen), requires_grad=trainable)
        self.tau = tau
        self.norm_dim = {"row": 1, "column": 0}[norm]

    def forward(self, v):
        return F.softmax(v @ F.normalize(self.weight, dim=self.norm_dim) / self.tau, dim=1)


def head_tau(tau: float, reference_k: int, k: int, norm: str = "row") -> float:
    """tau_c for a K-class row-normalised head: ``tau`` x sqrt(reference_k / K).

    A row-normalised (dim, K) weight has class columns of norm about sqrt(dim / K) (see
    ``NormFCHead``), so at a fixed tau_c the logits flatten as K grows: the released run's
    tau_c 0.1 at K = 10 gives a logit scale of sqrt(128 / 10) / 0.1 = 36 at dim 128, and at
    K = 317 only 6: the soft assignments flatten and the native argmax uses fewer classes than
    the embedding separates. Scaling tau_c by sqrt(reference_k / K) holds the released scale at
    every K and is exactly ``tau`` at K = reference_k (the paper's 10). A column-normalised
    head (unit class columns) has no such dependence; ``reference_k`` 0 switches it off.
    """
    if reference_k <= 0 or norm != "row":
        return float(tau)
    return float(tau) * math.sqrt(reference_k / k)


class _Encoder(nn.Module):
    def __init__(self, image_size, dim, width):
        super().__init__()
        self.cnn = GlyphCNN(image_size, dim, width)

    def forward(self, x):
        return F.normalize(self.cnn(x), dim=1)


# --------------------------------------------------------------------------- Super-AND parts
class AnchorNeighbourhoods:
    """Anchor neighbourhoods (AND): which tokens count their nearest memory neighbours as
    their own class. Anchors are the ``int(n * select_rate * round)`` tokens whose instance
    distribution p_i has the lowest entropy (the most confidently placed ones)."""

    def __init__(self, n: int, device):
        self.is_anchor = torch.zeros(n, dtype=torch.bool, device=device)
        self.neighbours = torch.zeros(n, 0, dtype=torch.long, device=device)

    @torch.no_grad()
    def update(self, memory: torch.Tensor, tau: float, n_anchors: int, size: int, chunk: int = 1024):
        n = len(memory)
        entropy = torch.empty(n, device=memory.device)
        nbrs = torch.empty(n, size, dtype=torch.long, device=memory.device)
        for s in range(0, n, chunk):
            logits = memory[s:s + chunk] @ memory.t() / tau
            logp = F.log_softmax(logits, dim=1)
            entropy[s:s + chunk] = -(logp.exp() * logp).sum(1)
            sims = logits.clone()
            rows = torch.arange(len(sims), device=memory.device)
            sims[rows, rows + s] = float("-inf")          # a token is not its own neighbour
            nbrs[s:s + chunk] = sims.topk(size, dim=1).indices
        self.is_anchor = torch.zeros(n, dtype=torch.bool, device=memory.device)
        if n_anchors > 0:
            order = torch.argsort(entropy, stable=True)
            self.is_anchor[order[:n_anchors]] = True
        self.neighbours = nbrs


def and_loss(logits: torch.Tensor, idx: torch.Tensor, ans: AnchorNeighbourhoods) -> torch.Tensor:
    """logits (m, n) = v . memory / T for rows whose token ids are ``idx`` (m,).
    -log of the probability mass on the token itself (+ its neighbours if it is an anchor)."""
    log_z = torch.logsumexp(logits, dim=1)
    own = logits.gather(1, idx[:, None])
    if ans.neighbours.shape[1] > 0:
        nb = logits.gather(1, ans.neighbours[idx])
        with_nb = torch.logsumexp(torch.cat([own, nb], 1), dim=1)
        log_mass = torch.where(ans.is_anchor[idx], with_nb, own[:, 0])
    else:
        log_mass = own[:, 0]
    return (log_z - log_mass).mean()


def ue_loss(logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Unification entropy: entropy of p_i over the other tokens (self excluded)."""
    # a large finite negative (not -inf) keeps 0 * log 0 at 0 instead of NaN
    masked = logits.scatter(1, idx[:, None], -1e4)
    logp = F.log_softmax(masked, dim=1)
    return -(logp.exp() * logp).sum(1).mean()


# --------------------------------------------------------------------------- method
@register
class TwoStage(Baseline):
    name = "twostage"
    needs_k = True
    fit_checkpoint = True
    PARAMS = {
        "width": Param(16, int, min=1, doc="channels of the first conv block"),
        "dim": Param(128, int, min=1, doc="embedding size (L2-normalised)"),
        "batch_size": Param(128, int, min=2, doc="images per step (capped at the corpus size)"),
        "momentum": Param(0.9, float, min=0, lt=1, doc="SGD (Nesterov) momentum, both stages"),
        "weight_decay": Param(5e-4, float, min=0, doc="SGD weight decay, both stages"),
        # stage 1 (Super-AND)
        "rounds": Param(3, int, min=1, doc="Super-AND rounds (round 0 = plain instance discrimination)"),
        "epochs_per_round": Param(4, int, min=1, doc="epochs of each round"),
        "stage1_lr": Param(0.03, float, gt=0, doc="stage-1 learning rate"),
        "stage1_lr_milestones": Param([3], list, item=int, min=0,
                                      doc="x0.1 at each, counted within a round"),
        "npc_temperature": Param(0.1, float, gt=0, doc="T of the memory-bank softmax"),
        "memory_momentum": Param(0.5, float, min=0, max=1, doc="memory-bank update momentum"),
        "select_rate": Param(0.25, float, min=0, max=1, doc="anchor fraction added per round"),
        "neighbourhood_size": Param(1, int, min=1, doc="neighbours an anchor counts as its class"),
        # w(t) = step * (epoch_in_round // ue_step_every): 0 for the first part of each round,
        # as in the paper (UE from the start pulled an untrained embedding together)
        "ue_weight_step": Param(0.2, float, min=0, doc="UE weight added every ue_step_every epochs"),
        "ue_step_every": Param(2, int, min=1, doc="epochs between UE weight steps"),
        "aug_temperature": Param(0.1, float, gt=0, doc="T of the in-batch AUG / CP loss"),
        # stage 2 (IIC + consistency preserving, Norm-FC heads)
        "stage2_epochs": Param(15, int, min=1, doc="stage-2 epochs"),
        "stage2_lr": Param(0.1, float, gt=0, doc="stage-2 learning rate (the paper's 0.01 is for 300 "
                                                 "epochs: in 15 the IIC heads barely train)"),
        "stage2_lr_milestones": Param([], list, item=int, min=0, doc="x0.1 at each stage-2 epoch listed"),
        "head_temperature": Param(0.1, float, gt=0, doc="tau_c of the Norm-FC head at head_reference_k classes"),
        "head_reference_k": Param(10, int, min=0,
                                  doc="row-normalised head: tau_c scales as sqrt(head_reference_k / K), holding "
                                      "the released run's logit scale (K = 10) at any K; 0: tau_c fixed"),
        "cp_weight": Param(1.0, float, min=0, doc="lambda: weight of the consistency-preserving loss"),
        "n_heads": Param(5, int, min=1, doc="sub-heads trained together (the best is kept)"),
        "train_heads": Param(False, bool, doc="train the Norm-FC weights (the paper's code and "
                                              "supplementary B keep them fixed at their random init)"),
        "head_norm": Param("row", str, choices=("row", "column"),
                           doc="Norm-FC normalisation: row = released code (each feature row of the "
                               "(dim, K) weight unit-norm), column = Eq. 13's w_j/|w_j|"),
        "embed_batch": Param(512, int, min=1, doc="images per no-grad forward when embedding"),
    }
    # Super-AND (Han et al. 2020, CIFAR): 5 rounds x 200 epochs, lr 0.03 (x0.1 at 80/120/160
    # per round), SGD nesterov momentum 0.9 wd 5e-4, batch 128, dim 128, T 0.1, memory
    # momentum 0.5, select rate 0.25, 1 neighbour, w(t) = 0.2 x (epoch // 80).
    # Two-stage: 300 epochs, lr 0.01 (same step rule), 5 Norm-FC heads with tau_c 0.1, lambda 1.
    PRESETS = {"paper": {"rounds": 5, "epochs_per_round": 200, "stage1_lr": 0.03,
                         "stage1_lr_milestones": [80, 120, 160], "ue_weight_step": 0.2, "ue_step_every": 80,
                         "stage2_epochs": 300, "stage2_lr": 0.01,
                         "stage2_lr_milestones": [80, 120, 160, 200, 240, 280],
                         "width": 64, "dim": 128, "batch_size": 128, "n_heads": 5}}

    def fit(self, corpus: Corpus, ctx: FitContext) -> ClusterResult:
        p = self.p
        t0 = time.time()
        device, gen = fit_setup(ctx)
        k = require_k(self.name, ctx)
        X = images_to_tensor(corpus.token_images())
        n = len(X)
        bs = int(min(p["batch_size"], n))
        if bs < 2:
            raise UserError("twostage needs at least 2 tokens")
        net = _Encoder(X.shape[-1], p["dim"], p["width"]).to(device)
        augment = GlyphAugment()

        def views(batch):
            x = X[batch].to(device)
            return torch.cat([augment(x, gen), augment(x, gen)])

        def set_lr(opt, base, milestones, epoch):
            lr = base * 0.1 ** sum(epoch >= m for m in milestones)
            for g in opt.param_groups:
                g["lr"] = lr
            return lr

        history: list[dict] = []
        # epochs are numbered over both stages: rounds x epochs_per_round of stage 1, then stage 2
        n1 = p["rounds"] * p["epochs_per_round"]
        # ---------------- stage 1: Super-AND
        memory = torch.from_numpy(embed(net, X, p["embed_batch"], device)).to(device)
        ans = AnchorNeighbourhoods(n, device)
        opt = torch.optim.SGD(net.parameters(), lr=p["stage1_lr"], momentum=p["momentum"],
                              weight_decay=p["weight_decay"], nesterov=True)
        T, m = p["npc_temperature"], p["memory_momentum"]
        heads, head_loss = None, np.zeros(p["n_heads"])

        def stage2_setup():
            tau_c = head_tau(p["head_temperature"], p["head_reference_k"], k, p["head_norm"])
            heads = nn.ModuleList([NormFCHead(p["dim"], k, tau_c, gen, p["head_norm"], p["train_heads"])
                                   for _ in range(p["n_heads"])]).to(device)
            params = list(net.parameters()) + (list(heads.parameters()) if p["train_heads"] else [])
            opt = torch.optim.SGD(params, lr=p["stage2_lr"], momentum=p["momentum"],
                                  weight_decay=p["weight_decay"], nesterov=True)
            return heads, opt

        with FitCheckpoint.for_fit(self, corpus, ctx) as ckpt:
            start = 0
            state = ckpt.load()
            if state is not None:
                start, history = state["epoch"], state["history"]
                net.load_state_dict(state["net"])
                if start > n1:                  # inside stage 2: its heads and optimiser
                    heads, opt = stage2_setup()
                    heads.load_state_dict(state["heads"])
                    head_loss = np.asarray(state["head_loss"])
                else:
                    memory = state["memory"].to(device)
                    ans.is_anchor = state["is_anchor"].to(device)
                    ans.neighbours = state["neighbours"].to(device)
                opt.load_state_dict(state["opt"])
                restore_rng(state["rng"], gen)
            bar = epoch_bar(n1, ctx.progress, f"{self.name}/1", min(start, n1))
            for step in range(start, n1):
                rnd, epoch = divmod(step, p["epochs_per_round"])
                if rnd > 0 and epoch == 0:
                    ans.update(memory, T, min(n, int(n * p["select_rate"] * rnd)),
                               min(p["neighbourhood_size"], n - 1))
                lr = set_lr(opt, p["stage1_lr"], p["stage1_lr_milestones"], epoch)
                w_ue = p["ue_weight_step"] * (epoch // max(1, p["ue_step_every"]))
                net.train()
                sums = np.zeros(4)
                cnt = 0
                for batch in shuffled_batches(n, bs, gen):
                    idx = batch.to(device)
                    v = net(views(batch))
                    idx2 = torch.cat([idx, idx])
                    logits = v @ memory.t() / T
                    l_and = and_loss(logits, idx2, ans)
                    l_aug = instance_pair_loss(v, p["aug_temperature"])
                    l_ue = ue_loss(logits, idx2) if w_ue > 0 else torch.zeros((), device=device)
                    loss = l_and + w_ue * l_ue + l_aug
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    with torch.no_grad():
                        b = len(batch)
                        v_mean = (v[:b] + v[b:]).detach() / 2
                        memory[idx] = F.normalize(m * memory[idx] + (1 - m) * v_mean, dim=1)
                    sums += np.array([loss.item(), l_and.item(), l_ue.item(), l_aug.item()]) * len(batch)
                    cnt += len(batch)
                s = sums / max(cnt, 1)
                stats = {"stage": 1, "round": rnd, "loss": s[0], "and": s[1], "ue": s[2],
                         "aug": s[3], "anchors": int(ans.is_anchor.sum()), "lr": lr}
                history.append(stats)
                ckpt.save({"epoch": step + 1, "net": net.state_dict(), "opt": opt.state_dict(),
                           "memory": memory, "is_anchor": ans.is_anchor, "neighbours": ans.neighbours,
                           "history": history, "rng": capture_rng(gen)})
                bar.update(1)
                log_epoch(ctx, bar, stats, step)
            bar.close()
            # ---------------- stage 2: IIC + consistency preserving, Norm-FC heads
            if heads is None:
                heads, opt = stage2_setup()
            start2 = max(start - n1, 0)
            bar = epoch_bar(p["stage2_epochs"], ctx.progress, f"{self.name}/2", start2)
            for epoch in bar:
                lr = set_lr(opt, p["stage2_lr"], p["stage2_lr_milestones"], epoch)
                net.train()
                sums, head_sum, cnt = np.zeros(3), np.zeros(p["n_heads"]), 0
                for batch in shuffled_batches(n, bs, gen):
                    b = len(batch)
                    v = net(views(batch))
                    per_head = [iic_loss(y[:b], y[b:]) for y in (h(v) for h in heads)]
                    l_mi = torch.stack(per_head).mean()
                    l_cp = instance_pair_loss(v, p["aug_temperature"])
                    loss = l_mi + p["cp_weight"] * l_cp
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    sums += np.array([loss.item(), l_mi.item(), l_cp.item()]) * b
                    head_sum += np.array([h.item() for h in per_head]) * b
                    cnt += b
                s = sums / max(cnt, 1)
                head_loss = head_sum / max(cnt, 1)
                stats = {"stage": 2, "loss": s[0], "mi": s[1], "cp": s[2], "lr": lr}
                history.append(stats)
                ckpt.save({"epoch": n1 + epoch + 1, "net": net.state_dict(), "opt": opt.state_dict(),
                           "heads": heads.state_dict(), "head_loss": head_loss, "history": history,
                           "rng": capture_rng(gen)})
                log_epoch(ctx, bar, stats, n1 + epoch)
            best = int(np.argmin(head_loss)) if p["stage2_epochs"] > 0 else 0
            v_all = embed(net, X, p["embed_batch"], device)
            with torch.no_grad():
                probs = heads[best](torch.from_numpy(v_all).to(device)).cpu().numpy()
        labels = probs.argmax(1)
        info = {"k_found": int(len(np.unique(labels))), "best_head": best,
                "head_losses": head_loss.tolist(),
                "loss": history[-1]["loss"] if history else None,
                "history": history, "wall_s": time.time() - t0}
        return ClusterResult(labels, v_all, info)
