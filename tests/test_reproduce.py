"""CI-sized reproduction of the committed tables (slow: builds the real corpora and fits real methods).

One run of `python -m signclust.reports.reproduce` (both parts) regenerates reports/ci/comparison.md
and reports/ci/paper_check.md; the tests assert its verdicts: every reproduced figure within its
stated tolerance of the committed full-size one, and every claim of params.yaml
``reproduce.claims`` / ``paper_claims`` (our method beats Ward on pixels, the seed objective
collapses, k-means on MNIST-test within ±0.03 of JULE Table 3's 0.528, ...).
"""
from __future__ import annotations

import pytest

from signclust.config import REPO_ROOT, load_params
from signclust.data.benchmarks import MNIST_DIR
from signclust.reports import reproduce as rp

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (MNIST_DIR / "t10k-images-idx3-ubyte").exists(),
                       reason="MNIST not fetched (scripts/setup.sh needs npm)"),
]

PARAMS = load_params()
CFG = PARAMS["reproduce"]
OUT = REPO_ROOT / "reports" / "ci"


@pytest.fixture(scope="module")
def reproduction():
    return rp.reproduce(PARAMS, OUT)


def _failures(verdicts):
    return "\n".join(f"{v['what']}: CI {v['ci']} vs {v['committed']} (tolerance {v['tolerance']}; {v['note']})"
                     for v in verdicts if not v["ok"])


def _part(doc, part):
    return [v for v in doc["verdicts"] if v["part"] == part]


def test_every_configured_row_and_check_is_reproduced(reproduction):
    n_seeds = len(CFG["seeds"])
    reduced = set(CFG.get("reduced") or {})
    expected = sum(1 if run in reduced else n_seeds for run, _ in rp.table_rows(CFG))
    assert len(_part(reproduction, "table")) == expected
    n_figures = sum(len(c["figures"]) for c in PARAMS["paper_check"]["checks"])
    assert len(_part(reproduction, "paper")) == n_figures
    assert len(_part(reproduction, "claim")) == len(CFG["claims"]) + len(CFG["paper_claims"])


def test_comparison_rows_match_the_committed_table(reproduction):
    table = _part(reproduction, "table")
    assert all(v["ok"] for v in table), _failures(table)


def test_paper_check_matches_the_committed_one(reproduction):
    paper = _part(reproduction, "paper")
    assert all(v["ok"] for v in paper), _failures(paper)


def test_claims_hold(reproduction):
    claims = _part(reproduction, "claim")
    assert all(v["ok"] for v in claims), _failures(claims)


def test_ci_tables_are_written(reproduction):
    comparison = (OUT / "comparison.md").read_text()
    for run, corpus in rp.table_rows(CFG):
        assert f"| {run} |" in comparison and f"## {corpus}" in comparison
    paper = (OUT / "paper_check.md").read_text()
    for check in PARAMS["paper_check"]["checks"]:
        assert f"| {check['method']} |" in paper
    verdicts = (OUT / "reproduction.md").read_text()
    assert f"**{len(reproduction['verdicts'])} of {len(reproduction['verdicts'])} hold.**" in verdicts
