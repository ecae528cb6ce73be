"""benchmarks/profile_baselines.py's PartTimer: outermost part wins, every patch is undone, and the
timed code computes what it computed before."""
import importlib.util
from pathlib import Path

import numpy as np
import torch
from torch import nn

from signclust.models.baselines import _nets, deepcluster

SPEC = importlib.util.spec_from_file_location(
    "profile_baselines", Path(__file__).resolve().parents[1] / "benchmarks" / "profile_baselines.py")
profile_baselines = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(profile_baselines)


def test_part_timer_counts_the_outermost_part_and_undoes_every_patch():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 4))
    x = torch.rand(8, 1, 4, 4)
    originals = (nn.Module.__call__, torch.Tensor.backward, _nets.embed, deepcluster.embed,
                 _nets.GlyphAugment.__call__)
    reference = _nets.embed(model, x, batch_size=4)
    with profile_baselines.PartTimer() as timer:
        assert deepcluster.embed is not originals[3]          # the copy imported by name is timed too
        out = deepcluster.embed(model, x, batch_size=4)       # its forward passes count as embedding
        assert timer.calls["embed"] == 1 and timer.calls["forward"] == 0
        loss = model(x).sum()                                 # a top-level forward pass
        loss.backward()
        assert timer.calls["forward"] == 1 and timer.calls["backward"] == 1
        assert timer.seconds["embed"] > 0 and timer.seconds["forward"] > 0
    assert np.array_equal(out, reference)
    assert (nn.Module.__call__, torch.Tensor.backward, _nets.embed, deepcluster.embed,
            _nets.GlyphAugment.__call__) == originals
    model(x)                                                  # no longer counted
    assert timer.calls["forward"] == 1


def test_profile_table_shares_and_rest():
    seconds = {p: 0.0 for p in profile_baselines.PARTS}
    seconds.update({"forward": 3.0, "backward": 5.0})
    md = profile_baselines.table([{"run": "swav", "plain": 10.2, "timed": 10.0, "seconds": seconds,
                                   "same": True}], "cypriot", 0, 2)
    row = [line for line in md.splitlines() if line.startswith("| `swav`")][0]
    cells = [c.strip() for c in row.strip("|").split("|")]
    header = [c.strip() for c in md.splitlines()[4].strip("|").split("|")]
    assert len(cells) == len(header)
    assert cells[header.index("forward")] == "3.0 (30%)" and cells[header.index("backward")] == "5.0 (50%)"
    assert cells[header.index("rest")] == "2.0 (20%)" and cells[-1] == "yes"
