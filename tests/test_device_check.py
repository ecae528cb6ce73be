"""benchmarks/device_check.py, run here on the CPU (a GPU machine runs it the same way): a fit per
row with its V and K, a refit and a second process compared label for label, the table written."""
import importlib.util
from pathlib import Path

import numpy as np

SPEC = importlib.util.spec_from_file_location(
    "device_check", Path(__file__).resolve().parents[1] / "benchmarks" / "device_check.py")
device_check = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(device_check)


def test_compared_says_yes_only_for_identical_labels():
    a = np.array([0, 0, 1, 1])
    assert device_check.compared(a, a.copy()) == "yes"
    assert device_check.compared(a, np.array([0, 1, 1, 1])) == "no: 25.0% of the labels differ"


def test_two_processes_give_the_same_labels_and_a_table(tiny, saved_corpus, tmp_path, capsys, one_torch_thread):
    labels, out = tmp_path / "labels.npz", tmp_path / "check.md"
    argv = ["--corpus", "tiny", "--corpus-dir", str(saved_corpus(tiny)), "--rows", "kmeans", "deepcluster",
            "--labels", str(labels), "--out", str(out)]
    assert device_check.main(argv + ["--twice"]) == 0
    kept = dict(np.load(labels))
    assert sorted(kept) == ["deepcluster", "kmeans"] and all(len(v) == 32 for v in kept.values())
    assert device_check.main(argv) == 0                      # compares with the file the first run kept
    table = out.read_text()
    row = next(line for line in table.splitlines() if line.startswith("| deepcluster |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "cpu" and cells[2] == "0" and 0 <= float(cells[3]) <= 1 and cells[4].isdigit()
    assert cells[7] == "yes" and cells[8] == "–"            # no committed figures for a test corpus
    kept["kmeans"] = kept["kmeans"][::-1].copy()               # another process that disagreed
    np.savez(labels, **kept)
    assert device_check.main(argv) == 1
    assert "kmeans: other labels than the earlier process" in capsys.readouterr().out
