"""How the CI reproduction judges a figure (fast: synthetic metrics documents, no fitting)."""
from __future__ import annotations

import json

import pytest

from signclust.errors import UserError
from signclust.reports import reproduce as rp


def _doc(run, corpus, per_seed_v, k=10, k_true=10, reduced=False, tolerance=0.03):
    per_seed = {f"seed{s}": {"v_measure": v, "k_found": k} for s, v in per_seed_v.items()}
    mean_v = sum(per_seed_v.values()) / len(per_seed_v)
    return {"method": run, "corpus": corpus, "k_true": k_true, "per_seed": per_seed,
            "mean": {"v_measure": mean_v, "k_found": k},
            "ci": {"reduced": reduced, "overrides": {"epochs": 1} if reduced else {}, "tolerance": tolerance}}


@pytest.fixture
def committed(tmp_path):
    (tmp_path / "lm_c.json").write_text(json.dumps(
        {"mean": {"v_measure": 0.60}, "per_seed": {"seed0": {"v_measure": 0.70}, "seed1": {"v_measure": 0.50}}}))
    return tmp_path


def test_same_setting_is_compared_with_the_same_seed_not_the_mean(committed):
    [v] = rp.table_verdicts([_doc("lm", "c", {0: 0.69})], committed)
    assert v["ok"] and v["committed"] == 0.70           # 0.69 is 0.09 from the mean 0.60
    [v] = rp.table_verdicts([_doc("lm", "c", {1: 0.69})], committed)
    assert not v["ok"] and v["committed"] == 0.50


def test_tolerance_applies_on_both_sides(committed):
    ok = rp.table_verdicts([_doc("lm", "c", {0: 0.6701})], committed)[0]
    bad = rp.table_verdicts([_doc("lm", "c", {0: 0.6699})], committed)[0]
    above = rp.table_verdicts([_doc("lm", "c", {0: 0.7301})], committed)[0]
    assert ok["ok"] and not bad["ok"] and not above["ok"]


def test_reduced_row_is_compared_with_the_committed_mean(committed):
    [v] = rp.table_verdicts([_doc("lm", "c", {0: 0.55}, reduced=True, tolerance=0.1)], committed)
    assert v["ok"] and v["committed"] == 0.60 and "epochs=1" in v["note"]


def test_missing_committed_file_or_seed_fails(committed):
    [v] = rp.table_verdicts([_doc("kmeans", "c", {0: 0.5})], committed)
    assert not v["ok"] and "no committed" in v["note"]
    [v] = rp.table_verdicts([_doc("lm", "c", {7: 0.7})], committed)
    assert not v["ok"] and v["committed"] is None


def test_claims_margin_and_k_share():
    docs = [_doc("lm", "c", {0: 0.66}, k=12, k_true=10), _doc("ward", "c", {0: 0.60})]
    cfg = {"claims": [{"corpus": "c", "a": "lm", "b": "ward", "margin": 0.05},
                      {"corpus": "c", "a": "lm", "b": "ward", "margin": 0.07},
                      {"corpus": "c", "a": "ward", "b": "lm", "margin": -0.065},
                      {"corpus": "c", "a": "lm", "b": "absent", "margin": 0.0},
                      {"corpus": "c", "run": "lm", "k_within": 0.2},
                      {"corpus": "c", "run": "lm", "k_within": 0.19}]}
    got = [v["ok"] for v in rp.claim_verdicts(docs, cfg)]
    assert got == [True, False, True, False, True, False]


def test_paper_rows_against_committed_and_paper_claims(tmp_path):
    row = {"method": "kmeans", "dataset": "mnist_test", "metric": "nmi", "n": 10000, "setting": "",
           "ours": 0.519, "paper": 0.528, "source": "JULE Table 3", "ci_tolerance": 0.02, "ci_reduced": False}
    path = tmp_path / "paper_check.json"
    path.write_text(json.dumps({"rows": [{**row, "ours": 0.530}]}))
    claims = {"paper_claims": [{"method": "kmeans", "metric": "nmi", "within": 0.01},
                               {"method": "kmeans", "metric": "nmi", "within": 0.005}]}
    same, close, far = rp.paper_verdicts([row], path, claims)
    assert same["ok"] and same["committed"] == 0.530
    assert close["ok"] and not far["ok"]
    assert not rp.paper_verdicts([{**row, "ours": 0.50}], path, {})[0]["ok"]
    assert not rp.paper_verdicts([row], tmp_path / "absent.json", {})[0]["ok"]


def test_unknown_run_in_reproduce_rows_is_one_clear_error(tmp_path):
    params = {"runs": {"lm": {"method": "lm"}}}
    with pytest.raises(UserError, match="nosuch"):
        rp.reproduce_table(params, {"rows": {"cypriot": ["lm", "nosuch"]}}, tmp_path)


def test_reduction_overrides_only_that_run():
    params = {"runs": {"tw": {"method": "twostage", "params": {"width": 16}}, "lm": {"method": "lm"}}}
    out = rp.reduced_params(params, "tw", {"params": {"rounds": 1}})
    assert out["runs"]["tw"]["params"] == {"width": 16, "rounds": 1}
    assert out["runs"]["lm"] == {"method": "lm"} and params["runs"]["tw"]["params"] == {"width": 16}


def test_paper_check_setting_by_scale():
    from signclust.reports.paper_check import check_setting
    params = {"paper_check": {"ci": {"tolerance": 0.02}}}
    small = {"method": "swav", "subset": 3000, "params": {"epochs": 10}, "setting": "3k",
             "ci": {"subset": 1000, "params": {"width": 8}, "setting": "1k", "tolerance": 0.1}}
    same = {"method": "kmeans", "params": {"pca_dim": 0}, "setting": "10k"}
    full = check_setting(small, params, "full")
    assert full == {k: v for k, v in small.items() if k != "ci"} and "ci" in small   # input untouched
    ci = check_setting(small, params, "ci")
    assert (ci["subset"], ci["params"], ci["setting"]) == (1000, {"epochs": 10, "width": 8}, "1k")
    assert ci["reduced"] and ci["ci_reduced"] and ci["ci_tolerance"] == 0.1
    exact = check_setting(same, params, "ci")
    assert exact == {**same, "ci_reduced": False, "ci_tolerance": 0.02}
