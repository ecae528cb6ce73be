"""scripts/deepdpm_split_lr.py: which accepted splits kept both clusters (no DeepDPM fit), and bad input."""
from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest

from signclust.config import REPO_ROOT

spec = importlib.util.spec_from_file_location("deepdpm_split_lr", REPO_ROOT / "scripts" / "deepdpm_split_lr.py")
study = importlib.util.module_from_spec(spec)
spec.loader.exec_module(study)


def test_a_split_counts_as_kept_only_if_both_clusters_hold_points_before_the_next_move():
    """Split steps every 30 epochs; a split step appends each split's two clusters at the end. At epoch
    55 one split (K 3 -> 4) whose second cluster is empty by epoch 84; at 115 two splits (K 4 -> 6), one
    keeping both sides, one with a side of 3 points (not above min_split_size 5) by epoch 144; the run
    ends at epoch 150."""
    sizes = [np.array([400, 300, 300])] * 55
    sizes += [np.array([400, 300, 150, 150])] * 29 + [np.array([400, 300, 300, 0])] * 31   # 55 .. 114
    sizes += [np.array([400, 300, 150, 150, 150, 150])] * 29                               # 115 .. 143
    sizes += [np.array([400, 300, 100, 200, 3, 297])] * 7                                  # 144 .. 150
    moves = [{"epoch": 55, "type": "split", "cluster": 2}, {"epoch": 85, "type": "merge", "clusters": [0, 1]},
             {"epoch": 115, "type": "split", "cluster": 0}, {"epoch": 115, "type": "split", "cluster": 1}]
    run = SimpleNamespace(cfg={"split_merge_every": 30, "min_split_size": 5}, moves=moves)
    assert study.kept_splits(run, sizes) == [(55, 1, 0), (115, 2, 1)]
    # a split step within the last epochs: the sizes after the last epoch decide
    assert study.kept_splits(run, sizes[:120]) == [(55, 1, 0), (115, 2, 2)]


@pytest.mark.parametrize("args, message", [(["--threads", "0"], "--threads must be at least 1, got 0"),
                                           (["--subset", "-1"], "--subset must be at least 0, got -1")])
def test_a_bad_setting_is_one_error_line_before_any_work(tmp_path, cli_error, args, message):
    out = tmp_path / "report.md"
    assert cli_error(study.main, [*args, "--out", str(out)], message) == f"error: {message}"
    assert not out.exists()


def test_a_missing_authors_folder_is_one_error_line(tmp_path, cli_error):
    out = tmp_path / "report.md"
    cli_error(study.main, [str(tmp_path / "MNIST"), "--out", str(out)], "train_data.pt not found")
    assert not out.exists()
