"""scripts/real_handwriting_check.py: our clusterer on real handwritten digits."""
from __future__ import annotations

import importlib.util

import numpy as np

from signclust.config import REPO_ROOT
from signclust.data.corpus import Corpus

spec = importlib.util.spec_from_file_location("real_handwriting_check",
                                              REPO_ROOT / "scripts" / "real_handwriting_check.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def test_tokens_are_cut_into_texts_of_the_asked_length_in_a_fixed_random_order():
    images = np.zeros((7, 8, 8), np.uint8)
    images[np.arange(7), np.arange(7), 0] = 255                        # seven distinct images
    corpus = Corpus.from_arrays(images, labels=list("abcabca"))         # one text per token
    cut = check.as_texts(corpus, 3, order_seed=None)                    # the tokens as they are
    assert cut.tokens["text_id"].tolist() == ["t00000"] * 3 + ["t00001"] * 3 + ["t00002"]
    assert cut.tokens["position"].tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert [t.tolist() for t in cut.texts()] == [[0, 1, 2], [3, 4, 5], [6]]
    assert cut.tokens["label"].tolist() == list("abcabca") and cut.meta["text_length"] == 3
    assert np.array_equal(cut.token_images(), corpus.token_images())
    shuffled = check.as_texts(corpus, 3)                                # seed 0's permutation
    order = np.random.default_rng(0).permutation(7)
    assert [t.tolist() for t in shuffled.texts()] == [order[:3].tolist(), order[3:6].tolist(), order[6:].tolist()]
    assert np.array_equal(shuffled.token_images(), corpus.token_images())


def test_table_on_known_numbers_with_the_best_row_in_bold():
    #       row: [(V, K found, seconds) per seed]
    table = {"digits": {"n": 1797, "k_true": 10, "lm": [(0.80, 40, 10.0), (0.90, 60, 20.0)],
                        "ward_pixels": [(0.70, 10, 0.1)] * 2, "ward_glyphs": [(0.60, 10, 0.1)] * 2,
                        "twostage": [(0.86, 10, 5.0), (0.88, 10, 5.0)]},
             "mnist_test": {"n": 3000, "k_true": 10, "lm": [(0.90, 30, 9.0)] * 2,
                            "ward_pixels": [(0.95, 10, 0.1)] * 2, "ward_glyphs": [(0.60, 10, 0.1)] * 2,
                            "twostage": [(0.80, 10, 5.0)] * 2}}
    text = check.markdown(table, [0, 1], 30)
    assert "scikit-learn's digits: all 1797; MNIST test: a fixed random subset of 3000 digits. The tokens" in text
    assert "MNIST test" not in check.markdown({"digits": table["digits"]}, [0, 1], 30)   # only the sets run
    assert ("| digits | 1797 | 10 | 0.850 ± 0.050 | 50 (40-60) | 0.700 ± 0.000 | 0.600 ± 0.000 | "
            "**0.870 ± 0.010** | +0.150 | 15.0 |") in text
    assert ("| mnist_test | 3000 | 10 | 0.900 ± 0.000 | 30 (30-30) | **0.950 ± 0.000** | 0.600 ± 0.000 | "
            "0.800 ± 0.000 | -0.050 | 9.0 |") in text


def test_bad_arguments_get_one_line(cli_error):
    cli_error(check.main, ["--sets", "emnist", "--out", "x.md"], "--sets emnist: unknown (known: mnist_test, digits)")
    cli_error(check.main, ["--text-length", "0", "--sets", "digits", "--out", "x.md"],
              "--text-length 0: expected a positive number of tokens")
    cli_error(check.main, ["--tokens", "0", "--out", "x.md"],
              "--tokens 0: expected a positive number of MNIST test digits")
    cli_error(check.main, ["--seeds", "0"], "make another study than reports/real_handwriting_check.md: "
                                            "give it its own --out")
