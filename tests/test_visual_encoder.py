"""The contrastive glyph encoder (models/visual_encoder.py) and where ``lm`` uses it: the loss
against a naive loop, the deformation at zero strength, determinism, and what it learns on a
corpus where the hand changes a sign's pixels more than the sign does."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from signclust.models import lm_clusterer as L
from signclust.models.base import FitContext, get_clusterer
from signclust.models.visual_encoder import EncoderConfig, elastic, nt_xent, train_encoder

from conftest import draw_shape


def test_nt_xent_against_a_naive_loop():
    g = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g)
    tau = 0.3
    z = torch.cat([z1, z2])
    z = z / z.norm(dim=1, keepdim=True)
    b, total = 5, 0.0
    for i in range(2 * b):
        twin = (i + b) % (2 * b)
        others = [math.exp(float(z[i] @ z[j]) / tau) for j in range(2 * b) if j != i]
        total += -(float(z[i] @ z[twin]) / tau - math.log(sum(others)))
    assert float(nt_xent(z1, z2, tau)) == pytest.approx(total / (2 * b), rel=1e-5)


def test_nt_xent_is_lowest_when_each_view_matches_its_twin():
    g = torch.Generator().manual_seed(1)
    z1 = torch.randn(8, 16, generator=g)
    assert float(nt_xent(z1, z1, 0.2)) < float(nt_xent(z1, z1[torch.randperm(8, generator=g)], 0.2))


def test_elastic_without_displacement_is_the_identity():
    x = torch.rand(3, 1, 24, 24, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(elastic(x, 0.0, torch.Generator().manual_seed(0)), x, atol=1e-6)
    moved = elastic(x, 2.0, torch.Generator().manual_seed(0))
    assert moved.shape == x.shape and not torch.allclose(moved, x, atol=1e-3)


def two_hand_glyphs(per_form: int = 24, seed: int = 0):
    """Three signs, each drawn by two hands (a 1 px pen and a 6 px pen, shifted by up to 4 px):
    a thin ring and a thick ring share fewer pixels than a thin ring and a thin cross."""
    rng = np.random.default_rng(seed)
    images, signs = [], []
    for s, shape in enumerate(("ring", "cross", "triangle")):
        for width in (1, 6):
            clean = draw_shape(shape, 32, width=width)
            for _ in range(per_form):
                dy, dx = rng.integers(-4, 5, size=2)
                images.append(np.roll(clean, (dy, dx), axis=(0, 1)))
                signs.append(s)
    return np.stack(images), np.array(signs)


def nearest_other_form_accuracy(x: np.ndarray, signs: np.ndarray, forms: np.ndarray) -> float:
    """Share of images whose nearest image *of the other pen* shows the same sign."""
    d = ((x[:, None] - x[None]) ** 2).sum(-1)
    d[forms[:, None] == forms[None]] = np.inf
    return float((signs[d.argmin(1)] == signs).mean())


def test_the_encoder_is_deterministic_unit_norm_and_sees_past_the_pen():
    images, signs = two_hand_glyphs()
    forms = np.tile(np.repeat([0, 1], 24), 3)
    cfg = EncoderConfig(epochs=8, strength=1.0, batch=48)
    a = train_encoder(images, cfg, seed=0, device="cpu")
    assert a.shape == (len(images), cfg.dim)
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(a, train_encoder(images, cfg, seed=0, device="cpu", cache=False))
    pixels = images.reshape(len(images), -1).astype(np.float64)
    # measured: pixels 0.57, the encoder 0.94
    assert nearest_other_form_accuracy(pixels, signs, forms) < 0.7 < 0.85 < nearest_other_form_accuracy(a, signs, forms)


def test_the_same_glyphs_config_and_seed_reuse_the_trained_encoder(monkeypatch):
    import torch

    import signclust.models.visual_encoder as E
    monkeypatch.setattr(E, "_CACHE", type(E._CACHE)())
    monkeypatch.setattr(E, "CACHE_SIZE", 4)                      # (8 in use) eviction after 4 entries
    images, _ = two_hand_glyphs(per_form=4)                      # 24 images
    cfg = EncoderConfig(epochs=1, strength=0.5, batch=12)
    trained, real = [], E._train
    monkeypatch.setattr(E, "_train", lambda *a: trained.append(a[2]) or real(*a))

    def after(*args, **kw):      # the features, then what the global generators draw next
        out = train_encoder(*args, device="cpu", **kw)
        return out, torch.rand(3), np.random.rand(3)

    first = after(images, cfg, seed=0)
    first[0][:] = 0                                              # the caller's copy, not the cache's
    again = after(images, cfg, seed=0)
    assert trained == [0]                                        # the second call did not train
    uncached = after(images, cfg, seed=0, cache=False)
    assert trained == [0, 0]
    assert np.array_equal(again[0], uncached[0]) and np.abs(again[0]).sum() > 0
    # a hit leaves the global generators where the training left them
    assert torch.equal(again[1], uncached[1]) and np.array_equal(again[2], uncached[2])
    after(images, cfg, seed=1)
    after(images, EncoderConfig(epochs=1, strength=0.25, batch=12), seed=0)
    after(images[:-1], cfg, seed=0)
    assert trained == [0, 0, 1, 0, 0]                            # seed, config or glyphs changed: trained
    assert len(E._CACHE) == 4
    after(images, cfg, seed=2)
    assert len(E._CACHE) == E.CACHE_SIZE == 4                    # the oldest entry went


def test_pairs_teach_the_variation_the_deformations_do_not_model():
    # no deformation at all: SimCLR alone cannot learn that a thin and a thick ring are one sign;
    # pairs (thin, thick) of half the images of each sign teach it, and it carries to the other half
    images, signs = two_hand_glyphs()
    forms = np.tile(np.repeat([0, 1], 24), 3)
    idx = np.arange(len(images))
    a = idx[(forms == 0) & (idx % 24 < 12)]                     # 36 thin images; a + 24: the same sign, thick
    held_out = idx % 24 >= 12
    cfg = EncoderConfig(epochs=4, strength=0.0, batch=48, pair_epochs=8)

    def accuracy(x):            # held-out images whose nearest image of the other pen is the same sign
        d = ((x[:, None] - x[None]) ** 2).sum(-1)
        d[forms[:, None] == forms[None]] = np.inf
        return float((signs[d.argmin(1)] == signs)[held_out].mean())
    before = accuracy(train_encoder(images, cfg, seed=0, device="cpu"))
    after = accuracy(train_encoder(images, cfg, seed=0, device="cpu", pairs=[(a, a + 24)]))
    assert before < 0.7 < 0.9 < after                            # measured 0.61, 0.99


def test_a_round_of_pairs_goes_on_from_the_cached_rounds_before_it(monkeypatch):
    import signclust.models.visual_encoder as E
    monkeypatch.setattr(E, "_CACHE", type(E._CACHE)())
    images, _ = two_hand_glyphs(per_form=4)                      # 24 images
    cfg = EncoderConfig(epochs=1, strength=0.5, batch=12, pair_epochs=2)
    calls, train, refine = [], E._train, E._refine
    monkeypatch.setattr(E, "_train", lambda *a: calls.append("train") or train(*a))
    monkeypatch.setattr(E, "_refine", lambda *a: calls.append(f"round {a[-1]}") or refine(*a))
    p1 = (np.arange(0, 12), np.arange(12, 24))
    p2 = (np.arange(0, 24, 2), np.arange(1, 24, 2))
    first = train_encoder(images, cfg, seed=0, device="cpu", pairs=[p1])
    assert calls == ["train", "round 1"]
    second = train_encoder(images, cfg, seed=0, device="cpu", pairs=[p1, p2])
    assert calls == ["train", "round 1", "round 2"]              # round 1 from the cache, round 2 trained
    again = train_encoder(images, cfg, seed=0, device="cpu", pairs=[p1, p2])
    assert calls == ["train", "round 1", "round 2"]
    after_hit = torch.rand(3)
    uncached = train_encoder(images, cfg, seed=0, device="cpu", pairs=[p1, p2], cache=False)
    assert calls[-3:] == ["train", "round 1", "round 2"]
    assert np.array_equal(second, uncached) and np.array_equal(again, uncached)
    assert torch.equal(after_hit, torch.rand(3))                 # a hit leaves the generators as training does
    assert not np.array_equal(first, second)
    assert not np.array_equal(first, train_encoder(images, cfg, seed=0, device="cpu"))
    # only the rounds read pair_epochs: another value retrains them, not the SimCLR phase
    n = len(calls)
    train_encoder(images, replace(cfg, pair_epochs=3), seed=0, device="cpu", pairs=[p1])
    assert calls[n:] == ["round 1"]
    with pytest.raises(ValueError, match="a round of pairs has 3 first and 2 second images"):
        train_encoder(images, cfg, seed=0, device="cpu", pairs=[(np.arange(3), np.arange(2))], cache=False)


def test_two_rounds_from_one_cached_state_each_equal_a_fresh_training(monkeypatch):
    """Two variants whose last round differs go on from one cached state (an ablation's variants):
    the second must not start from the Adam moments the first updated. Before the copy in _refine
    the second round's features differed from its uncached training."""
    import signclust.models.visual_encoder as E
    monkeypatch.setattr(E, "_CACHE", type(E._CACHE)())
    images, _ = two_hand_glyphs(per_form=4)                      # 24 images
    cfg = EncoderConfig(epochs=1, strength=0.5, batch=12, pair_epochs=2)
    p1 = (np.arange(0, 12), np.arange(12, 24))
    p2 = (np.arange(0, 24, 2), np.arange(1, 24, 2))
    train_encoder(images, cfg, seed=0, device="cpu", pairs=[p1])            # caches the SimCLR state
    second = train_encoder(images, cfg, seed=0, device="cpu", pairs=[p2])   # from that state again
    assert np.array_equal(second, train_encoder(images, cfg, seed=0, device="cpu", pairs=[p2], cache=False))


def test_an_epoch_sees_at_most_max_images(monkeypatch):
    import signclust.models.visual_encoder as E
    images, _ = two_hand_glyphs(per_form=8)                      # 48 images
    seen, real = [], E.images_to_tensor
    monkeypatch.setattr(E, "images_to_tensor", lambda arr: seen.append(len(arr)) or real(arr))
    train_encoder(images, EncoderConfig(epochs=2, strength=0.5, batch=10, max_images=20), seed=0, device="cpu")
    # 2 epochs x 2 batches of 10, then the embedding of all 48 images in chunks of 20
    assert seen == [10, 10, 10, 10, 20, 20, 8]


def test_fewer_images_than_a_batch_of_eight_gives_the_untrained_features():
    images, _ = two_hand_glyphs(per_form=1)                      # 6 images: no training step
    out = train_encoder(images, EncoderConfig(epochs=2, strength=0.5), seed=0, device="cpu", progress=True)
    assert out.shape == (6, 64) and np.isfinite(out).all()


@pytest.mark.parametrize("clean, epochs, expect", [(True, 10, False), (False, 0, False), (False, 10, True)])
def test_lm_trains_the_encoder_only_on_a_noisy_corpus(monkeypatch, tiny_corpus, clean, epochs, expect):
    corpus = tiny_corpus(n_types=3, per_type=6, n_texts=3, duplicates=40 if clean else 0,
                         noise=0.0 if clean else 12.0)
    calls = []

    def fake(glyphs, cfg, seed, device, progress):
        calls.append((cfg.epochs, cfg.strength))
        return np.random.default_rng(seed).normal(size=(len(glyphs), 4)).astype(np.float32)
    monkeypatch.setattr("signclust.models.visual_encoder.train_encoder", fake)
    # self_rounds 0: one fit, so one encoder training (the self-training round's own test is below)
    get_clusterer("lm", encoder_epochs=epochs, self_rounds=0).fit(corpus, FitContext(seed=0, progress=False, device="cpu"))
    assert calls == ([(epochs, L.LMConfig().encoder_strength)] if expect else [])


def test_with_encoder_scales_the_two_blocks():
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(30, 5)) * 7.0

    class Ctx:
        seed, device, progress = 0, "cpu", False
    images = np.zeros((30, 16, 16), np.uint8)
    images[:, 4:12, 6:9] = 255
    images[np.arange(30) % 2 == 0, 6:9, 2:14] = 255
    cfg = L.LMConfig(encoder_epochs=1, glyph_weight=0.5)
    x = L.with_encoder(feats, images, cfg, Ctx())
    assert x.shape == (30, 5 + 64)
    assert x[:, :5].var(0).sum() == pytest.approx(0.25, rel=1e-4)
    assert x[:, 5:].var(0).sum() == pytest.approx(1.0, rel=1e-4)


def test_mined_pairs_against_a_naive_loop():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3))
    x[10] = x[11] + 1e-3                                         # one tight pair, tokens of one image
    image_index = np.arange(40)
    image_index[11] = 10
    texts = [np.arange(0, 15), np.arange(15, 32), np.arange(32, 34), np.arange(34, 40)]
    ratio = 0.8
    want = []
    for t in texts:
        if len(t) < 3:
            continue
        d = np.linalg.norm(x[t][:, None] - x[t][None], axis=-1)
        np.fill_diagonal(d, np.inf)
        for i in range(len(t)):
            j = int(np.argmin(d[i]))
            first, second = np.sort(d[i])[:2]
            if int(np.argmin(d[j])) == i and first <= ratio * second and i < j and image_index[t[i]] != image_index[t[j]]:
                want.append((image_index[t[i]], image_index[t[j]]))
    a, b = L.mined_pairs(x, texts, image_index, ratio)
    assert list(zip(a.tolist(), b.tolist())) == want and len(want) >= 3
    assert (10, 10) not in want                                  # the pair of one image twice is left out


def test_lm_mines_pairs_again_each_round(monkeypatch, tiny_corpus):
    corpus = tiny_corpus(n_types=3, per_type=20, n_texts=3, noise=12.0)
    rounds = []

    def fake(glyphs, cfg, seed, device, progress, pairs=()):
        rounds.append([len(a) for a, _ in pairs])
        assert cfg.pair_epochs == 7
        return np.random.default_rng(len(pairs)).normal(size=(len(glyphs), 4)).astype(np.float32)
    monkeypatch.setattr("signclust.models.visual_encoder.train_encoder", fake)
    fit = get_clusterer("lm", encoder_epochs=2, encoder_pair_rounds=2, encoder_pair_epochs=7, encoder_pair_ratio=1.0,
                        self_rounds=0)                          # the mined rounds alone (self rounds: below)
    fit.fit(corpus, FitContext(seed=0, progress=False, device="cpu"))
    assert len(rounds) == 3 and rounds[0] == [] and len(rounds[1]) == 1 and len(rounds[2]) == 2
    assert rounds[2][0] == rounds[1][0] >= 8                     # the first round's pairs, then new ones



def test_type_pairs_against_a_naive_reference():
    """Each token of a type is paired with a random permutation of its type (types in order, the same
    draws), pairs of one image twice left out: equal to a loop over the types."""
    z = np.array([2, 0, 2, 1, 0, 2, 0, 3, 2, 1])
    image_index = np.array([0, 1, 2, 3, 4, 2, 5, 6, 7, 8])                 # tokens 2 and 5: one image
    rng, want = np.random.default_rng(0), []
    for t in sorted(set(z.tolist())):
        members = np.flatnonzero(z == t)
        for i, j in zip(members, rng.permutation(members)):
            if image_index[i] != image_index[j]:
                want.append((int(image_index[i]), int(image_index[j])))
    a, b = L.type_pairs(z, image_index, np.random.default_rng(0))
    assert list(zip(a.tolist(), b.tolist())) == want
    assert len(want) >= 4 and 6 not in a.tolist() + b.tolist()           # type 3 has one token: no pair
    a3, b3 = L.type_pairs(z, image_index, np.random.default_rng(0), at_most=3)   # a subset, in order
    pos = [want.index(p) for p in zip(a3.tolist(), b3.tolist())]
    assert len(pos) == 3 and pos == sorted(pos)
    assert L.type_pairs(z, image_index, np.random.default_rng(0), at_most=len(want))[0].tolist() == a.tolist()


def test_self_rounds_train_the_encoder_on_the_fitted_types_and_fit_again(monkeypatch, tiny_corpus):
    corpus = tiny_corpus(n_types=3, per_type=20, n_texts=3, noise=12.0)
    rounds, fits = [], []

    def fake(glyphs, cfg, seed, device, progress, pairs=()):
        rounds.append([(a.copy(), b.copy()) for a, b in pairs])
        return np.random.default_rng(len(pairs)).normal(size=(len(glyphs), 4)).astype(np.float32)
    monkeypatch.setattr("signclust.models.visual_encoder.train_encoder", fake)
    select = L.LMSignClusterer.select

    def spy(self, *args):
        result, symbols = select(self, *args)
        fits.append(result)
        return result, symbols
    monkeypatch.setattr(L.LMSignClusterer, "select", spy)
    ctx = FitContext(seed=0, progress=False, device="cpu")
    kw = dict(encoder_epochs=2, encoder_pair_rounds=1, encoder_pair_ratio=1.0)
    # no style pass and no cuts after the fit: the result is then the last select's own
    result = get_clusterer("lm", self_rounds=2, style_alignment=False, splits=False, **kw).fit(corpus, ctx)
    assert len(fits) == 3 and result is fits[-1]
    assert result.info["self_training_k"] == [f.info["k_found"] for f in fits]
    # the encoder's last call: the mined round, then one round of type pairs of each earlier fit
    last = rounds[-1]
    assert len(last) == 3 and max(len(r) for r in rounds) == 3
    for i in (0, 1):
        a, b = L.type_pairs(fits[i].labels, corpus.image_index(), np.random.default_rng([0, i]), 1000)
        assert np.array_equal(last[1 + i][0], a) and np.array_equal(last[1 + i][1], b) and len(a) > 0
    # a labelling whose types hold one image each gives no pairs: no round is trained on it
    calls = len(rounds)
    assert len(L.type_pairs(np.arange(len(corpus.image_index())), corpus.image_index(), np.random.default_rng(0))[0]) == 0
    tokens = (corpus.image_index(), [t for t in corpus.texts() if len(t)],
              np.unique(corpus.tokens["text_id"].to_numpy(), return_inverse=True)[1])
    x = L.with_encoder(np.zeros((len(corpus.images), 3)), np.asarray(corpus.images), L.LMConfig(**kw), ctx,
                       tokens, fitted=(np.arange(corpus.n_tokens),))
    assert x.shape[0] == len(corpus.images) and max(len(r) for r in rounds[calls:]) == 1   # the mined round only
    # self_rounds 0: one fit and the info as before; the default (1): two fits
    fits.clear()
    plain = get_clusterer("lm", self_rounds=0, **kw).fit(corpus, ctx)
    assert len(fits) == 1 and "self_training_k" not in plain.info
    fits.clear()
    default = get_clusterer("lm", **kw).fit(corpus, ctx)
    assert L.LMConfig().self_rounds == 1 and len(fits) == 2 and len(default.info["self_training_k"]) == 2


def test_compute_dtype_follows_the_setting_and_auto_follows_the_hardware(monkeypatch):
    import signclust.models.visual_encoder as E
    cpu = torch.device("cpu")
    for var in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):                 # no cap on oneDNN at first
        monkeypatch.delenv(var, raising=False)
    assert E.compute_dtype("fp32", cpu) == torch.float32
    assert E.compute_dtype("bf16", cpu) == torch.bfloat16
    for avx512_bf16, amx, expect in [(False, False, torch.float32), (True, False, torch.bfloat16),
                                     (False, True, torch.bfloat16)]:
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda v=avx512_bf16: v)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda v=amx: v)
        assert E.compute_dtype("auto", cpu) == expect
    with pytest.raises(ValueError, match="'fp16' is not one of"):
        E.compute_dtype("fp16", cpu)
    # bf16 hardware (AMX, the last case above), but oneDNN capped below it, where it would emulate bf16:
    # auto keeps float32
    for var, cap, expect in [("ONEDNN_MAX_CPU_ISA", "AVX2", torch.float32),
                             ("ONEDNN_MAX_CPU_ISA", "avx512_core", torch.float32),
                             ("DNNL_MAX_CPU_ISA", "AVX512_CORE_VNNI", torch.float32),
                             ("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16", torch.bfloat16),
                             ("ONEDNN_MAX_CPU_ISA", "ALL", torch.bfloat16)]:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
        monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
        monkeypatch.setenv(var, cap)
        assert E.compute_dtype("auto", cpu) == expect, (var, cap)
        assert E.compute_dtype("bf16", cpu) == torch.bfloat16          # forced: the cap is the user's business


def test_a_bf16_encoder_is_deterministic_float32_and_sees_past_the_pen_as_fp32_does():
    images, signs = two_hand_glyphs()
    forms = np.tile(np.repeat([0, 1], 24), 3)
    fp32 = EncoderConfig(epochs=8, strength=1.0, batch=48)
    bf16 = replace(fp32, precision="bf16")
    a = train_encoder(images, bf16, seed=0, device="cpu", cache=False)
    assert a.dtype == np.float32 and np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(a, train_encoder(images, bf16, seed=0, device="cpu", cache=False))
    b = train_encoder(images, fp32, seed=0, device="cpu", cache=False)
    assert not np.allclose(a, b, atol=1e-3)                   # the passes did run in bf16
    assert nearest_other_form_accuracy(a, signs, forms) > 0.85


def test_lm_rejects_an_unknown_encoder_precision_and_offers_what_the_encoder_knows():
    from signclust.errors import UserError
    from signclust.models.lm_clusterer import LMConfig
    from signclust.models.params import params_of
    from signclust.models.visual_encoder import PRECISIONS
    with pytest.raises(UserError, match="encoder_precision"):
        get_clusterer("lm", encoder_precision="fp16")
    # lm_clusterer spells the choices out to keep torch out of its import; they must stay the encoder's
    assert params_of(LMConfig)["encoder_precision"].choices == PRECISIONS
