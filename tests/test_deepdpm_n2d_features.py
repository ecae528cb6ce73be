"""scripts/deepdpm_n2d_features.py: N2D's autoencoder as n2d.py builds it, and its codes (no DeepDPM fit)."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch.nn as nn

from signclust.config import REPO_ROOT

spec = importlib.util.spec_from_file_location("n2d_features", REPO_ROOT / "scripts" / "deepdpm_n2d_features.py")
study = importlib.util.module_from_spec(spec)
spec.loader.exec_module(study)


def test_the_autoencoder_is_n2ds_with_a_linear_code_and_output():
    enc, dec = study.n2d_autoencoder(784, 10)
    linears = [m for m in enc if isinstance(m, nn.Linear)] + [m for m in dec if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [
        (784, 500), (500, 500), (500, 2000), (2000, 10), (10, 2000), (2000, 500), (500, 500), (500, 784)]
    # ReLU after every layer but the code's and the output's
    assert isinstance(enc[-1], nn.Linear) and isinstance(dec[-1], nn.Linear)
    assert sum(isinstance(m, nn.ReLU) for m in enc) == 3 and sum(isinstance(m, nn.ReLU) for m in dec) == 3
    assert all(float(m.bias.detach().abs().max()) == 0.0 for m in linears)


def test_codes_are_one_per_image_and_follow_the_seed():
    rng = np.random.default_rng(0)
    images = (rng.random((64, 8, 8)) * 255).astype(np.uint8)
    a = study.n2d_codes(images, 2, seed=3, batch_size=16)
    assert a.shape == (64, 10)
    assert np.array_equal(a, study.n2d_codes(images, 2, seed=3, batch_size=16))
    assert not np.array_equal(a, study.n2d_codes(images, 2, seed=4, batch_size=16))


@pytest.mark.parametrize("args, message", [(["--ae-epochs", "0"], "--ae-epochs must be at least 1, got 0"),
                                           (["--threads", "0"], "--threads must be at least 1, got 0"),
                                           (["--subset", "-5"], "--subset must be at least 0, got -5")])
def test_a_bad_setting_is_one_error_line_before_any_work(tmp_path, cli_error, args, message):
    out = tmp_path / "report.md"
    assert cli_error(study.main, [*args, "--out", str(out)], message) == f"error: {message}"
    assert not out.exists()


def test_the_seeds_summary_reads_the_means_against_issue_10s_targets():
    line = study.seeds_summary([(9, 0.885), (9, 0.888), (9, 0.890)], 10, 0.94)
    assert line == ("DeepDPM over 3 seeds: K 9.0 ± 0.0 (true 10: -10%, within ±20%), NMI 0.888 ± 0.002 "
                    "(paper 0.94: gap -0.052, outside 0.05).")
    # the band's edges count as within: K 8 of 10 is -20%, NMI 0.63 against 0.68 a gap of -0.05
    line = study.seeds_summary([(8, 0.63)], 10, 0.68)
    assert line == ("DeepDPM over 1 seed: K 8.0 ± 0.0 (true 10: -20%, within ±20%), NMI 0.630 ± 0.000 "
                    "(paper 0.68: gap -0.050, within 0.05).")
