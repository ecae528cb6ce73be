"""scripts/deepdpm_authors_embeddings.py: reading the DeepDPM authors' feature files (no fit here)."""
from __future__ import annotations

import importlib.util
import subprocess

import numpy as np
import pytest
import torch

from signclust.config import REPO_ROOT
from signclust.errors import UserError

spec = importlib.util.spec_from_file_location("authors_embeddings",
                                              REPO_ROOT / "scripts" / "deepdpm_authors_embeddings.py")
study = importlib.util.module_from_spec(spec)
spec.loader.exec_module(study)


def _folder(tmp_path, features, labels):
    torch.save(features, tmp_path / "train_data.pt")
    torch.save(labels, tmp_path / "train_labels.pt")
    return tmp_path


def test_features_are_l2_rows_of_a_fixed_subset_with_their_labels(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(50, 4)).astype(np.float32)
    y = np.arange(50) % 5
    # the authors' MNIST files hold tensors, their FASHION features a numpy array: both read
    folder = _folder(tmp_path, x, torch.from_numpy(y.astype(np.uint8)))
    got, labels, hashes = study.load(folder, subset=20)
    keep = np.sort(np.random.default_rng(0).permutation(50)[:20])
    assert np.array_equal(labels, y[keep])
    assert np.allclose(got, x[keep] / np.linalg.norm(x[keep], axis=1, keepdims=True), atol=1e-6)
    # the hash git gives the file (what the authors' repository lists for it)
    want = subprocess.run(["git", "hash-object", str(folder / "train_data.pt")], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert hashes["train_data"] == want
    all_rows, all_labels, _ = study.load(_folder(tmp_path, torch.from_numpy(x), torch.from_numpy(y)), subset=0)
    assert len(all_rows) == 50 and np.array_equal(all_labels, y)


def test_a_missing_or_unsafe_file_is_one_error(tmp_path):
    with pytest.raises(UserError, match="train_data.pt not found"):
        study.load(tmp_path, subset=0)
    torch.save({"fn": print}, tmp_path / "train_data.pt")            # a pickled function: never run
    torch.save(torch.zeros(3), tmp_path / "train_labels.pt")
    with pytest.raises(UserError, match="not a tensor or numpy array file"):
        study.load(tmp_path, subset=0)
    _folder(tmp_path, torch.zeros(4, 2), torch.zeros(3))
    with pytest.raises(UserError, match=r"expected \(n, d\) features and n labels"):
        study.load(tmp_path, subset=0)
