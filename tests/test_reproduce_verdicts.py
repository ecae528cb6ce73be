"""How the CI reproduction judges a figure (fast: synthetic metrics documents, no fitting)."""
from __future__ import annotations

import json

import pytest

from signclust.config import load_params
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
                      {"corpus": "c", "run": "lm", "k_within": 0.19},
                      {"corpus": "c", "run": "lm", "v_min": 0.66},
                      {"corpus": "c", "run": "lm", "v_min": 0.661},
                      {"corpus": "c", "run": "absent", "v_min": 0.0}]}
    got = [v["ok"] for v in rp.claim_verdicts(docs, cfg)]
    assert got == [True, False, True, False, True, False, True, False, False]


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


# -- every seed, every figure ------------------------------------------------------------------

FIGS = {"v_measure": 0.61, "fixed_k_v_measure": 0.55, "k_found": 53, "ari": 0.2}


def _full_doc(per_seed: dict, figures=tuple(FIGS), tolerance=rp.TOLERANCE):
    mean = {k: sum(s[k] for s in per_seed.values()) / len(per_seed) for k in FIGS}
    return {"method": "lm", "corpus": "c", "k_true": 53, "mean": mean,
            "per_seed": {f"seed{s}": v for s, v in per_seed.items()},
            "ci": {"reduced": False, "overrides": {}, "tolerance": tolerance, "figures": list(figures)}}


def _committed_doc(tmp_path, per_seed: dict):
    mean = {k: sum(s[k] for s in per_seed.values()) / len(per_seed) for k in FIGS}
    (tmp_path / "lm_c.json").write_text(json.dumps({"mean": mean, "per_seed": {f"seed{s}": v for s, v in per_seed.items()}}))


def test_every_seed_and_every_figure_is_compared_with_the_same_seed(tmp_path):
    committed = {s: {k: v + 0.01 * s for k, v in FIGS.items()} for s in (0, 1, 2)}
    _committed_doc(tmp_path, committed)
    ci = {s: dict(v) for s, v in committed.items()}
    ci[2]["ari"] += 0.0015                 # beyond 1e-3
    ci[1]["k_found"] += 1                  # one more type found
    ci[0]["fixed_k_v_measure"] -= 0.0009   # within 1e-3
    verdicts = rp.table_verdicts([_full_doc(ci)], tmp_path)
    assert len(verdicts) == 3 * 4
    assert {(v["what"].split(": ")[1], v["note"].split()[1]) for v in verdicts} == \
        {(k, str(s)) for k in FIGS for s in (0, 1, 2)}
    failed = sorted((v["what"], v["note"]) for v in verdicts if not v["ok"])
    assert failed == [("lm on c: ari", "seed 2 vs committed seed 2"), ("lm on c: k_found", "seed 1 vs committed seed 1")]
    for v in verdicts:                     # each against its own seed's committed figure
        seed, key = int(v["note"].split()[1]), v["what"].split(": ")[1]
        assert v["committed"] == committed[seed][key]


def test_same_seed_tolerance_is_a_thousandth_by_default_and_in_params():
    assert rp.TOLERANCE == 0.001
    cfg = load_params()["reproduce"]
    assert float(cfg["tolerance"]) <= 0.001
    assert set(cfg["figures"]) >= {"v_measure", "fixed_k_v_measure", "k_found", "ari"}
    assert len(cfg["seeds"]) >= 2           # not only seed 0


def test_a_figure_the_committed_file_lacks_fails(tmp_path):
    committed = {0: {k: v for k, v in FIGS.items() if k != "ari"}}
    (tmp_path / "lm_c.json").write_text(json.dumps({"mean": committed[0], "per_seed": {"seed0": committed[0]}}))
    verdicts = rp.table_verdicts([_full_doc({0: dict(FIGS)})], tmp_path)
    bad = [v for v in verdicts if not v["ok"]]
    assert [v["what"] for v in bad] == ["lm on c: ari"] and "has no such figure" in bad[0]["note"]


def test_reduced_row_compares_its_own_figures_with_the_committed_mean(tmp_path):
    _committed_doc(tmp_path, {0: dict(FIGS), 1: {**FIGS, "v_measure": 0.65}})
    doc = _full_doc({0: {**FIGS, "v_measure": 0.60, "k_found": 40}}, figures=["v_measure"], tolerance=0.05)
    doc["ci"].update(reduced=True, overrides={"epochs": 2})
    [v] = rp.table_verdicts([doc], tmp_path)                 # K found is not one of its figures
    assert v["ok"] and v["committed"] == pytest.approx(0.63) and "epochs=2" in v["note"]


def test_missing_paper_data_names_each_file_and_how_to_get_it(tmp_path, monkeypatch):
    from signclust.data import benchmarks
    monkeypatch.setattr(benchmarks, "MNIST_DIR", tmp_path / "mnist")
    monkeypatch.setattr(benchmarks, "FASHION_DIR", tmp_path / "fashion")
    params = {"paper_check": {"checks": [{"dataset": "mnist_test"}, {"dataset": "fashion_test"},
                                         {"dataset": "digits"}]}}
    missing = rp.missing_paper_data(params)
    assert len(missing) == 4
    assert any("mnist_test:" in m and "t10k-images-idx3-ubyte" in m and "setup.sh" in m for m in missing)
    assert any("fashion_test:" in m and "t10k-labels-idx1-ubyte" in m and "apt-get" in m for m in missing)
    for folder in ("mnist", "fashion"):
        (tmp_path / folder).mkdir()
        for kind in ("images-idx3", "labels-idx1"):
            (tmp_path / folder / f"t10k-{kind}-ubyte.gz").write_bytes(b"")
    assert rp.missing_paper_data(params) == []


def test_cli_without_paper_data_is_one_error_unless_only_the_table(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(rp, "missing_paper_data", lambda params: ["mnist_test: not found: run scripts/setup.sh"])
    ran = []
    monkeypatch.setattr(rp, "reproduce", lambda params, out, parts, progress: ran.append(parts) or
                        {"verdicts": [], "failed": 0})
    with pytest.raises(SystemExit) as stop:
        rp.main(["--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "mnist_test" in err[0] and "--only table" in err[0]
    assert ran == []
    assert rp.main(["--only", "table", "--out", str(tmp_path)]) == 0 and ran == [("table",)]


def test_claim_verdicts_report_what_was_compared_and_survive_an_absent_row():
    """Each claim kind's whole verdict, as reproduction.md prints it: what is claimed, the CI figure, the
    committed one where there is one, the bound and the note; a claim on a row that was not reproduced
    fails with a note saying so (mutation testing: no test had a K claim on an absent row, so a mutant
    that raised a TypeError there survived, and no test read any field but ``ok``)."""
    docs = [_doc("lm", "c", {0: 0.66}, k=12, k_true=10), _doc("ward", "c", {0: 0.60})]
    cfg = {"claims": [{"corpus": "c", "a": "lm", "b": "ward", "margin": 0.05},
                      {"corpus": "c", "a": "lm", "b": "absent", "margin": 0.0, "what": "lm beats a missing row"},
                      {"corpus": "c", "run": "lm", "k_within": 0.2},
                      {"corpus": "c", "run": "absent", "k_within": 0.2},
                      {"corpus": "c", "run": "lm", "v_min": 0.5},
                      {"corpus": "c", "run": "absent", "v_min": 0.0}]}
    got = rp.claim_verdicts(docs, cfg)
    assert got[0] == pytest.approx({"part": "claim", "what": "lm beats ward on c", "committed": None,
                                    "ci": 0.06, "tolerance": 0.05, "ok": True, "note": "V(lm) - V(ward) >= 0.05"})
    assert got[1] == {"part": "claim", "what": "lm beats a missing row", "committed": None, "ci": None,
                      "tolerance": 0.0, "ok": False, "note": "V(lm) - V(absent) >= 0.0: a row was not reproduced"}
    assert got[2] == {"part": "claim", "what": "lm finds K within ±20% of the true number on c", "committed": 10,
                      "ci": 12, "tolerance": 0.2, "ok": True, "note": "K found 12 vs true 10"}
    assert got[3] == {"part": "claim", "what": "absent finds K within ±20% of the true number on c",
                      "committed": None, "ci": None, "tolerance": 0.2, "ok": False,
                      "note": "K within ±20%: the row was not reproduced"}
    assert got[4] == {"part": "claim", "what": "lm reaches V >= 0.5 on c", "committed": None, "ci": 0.66,
                      "tolerance": 0.5, "ok": True, "note": "V(lm) >= 0.5"}
    assert got[5] == {"part": "claim", "what": "absent reaches V >= 0.0 on c", "committed": None, "ci": None,
                      "tolerance": 0.0, "ok": False, "note": "V(absent) >= 0.0: the row was not reproduced"}


def test_paper_verdicts_whole_and_at_their_bounds(tmp_path):
    """A paper-check verdict as reproduction.md prints it, for a row at the same setting exactly at its
    tolerance (it holds: the bound is inclusive), a row reduced in CI, a row with no committed figure,
    a row committed on another CPU when reproduce.cross_cpu has no paper bound (its own tolerance stays),
    and a paper claim exactly at its bound (mutation testing: `<` for `<=`, the notes and the fields
    survived every test)."""
    row = {"method": "kmeans", "dataset": "mnist_test", "metric": "nmi", "n": 3000, "setting": "epochs=2",
           "ours": 0.5, "paper": 0.75, "source": "JULE Table 3", "ci_tolerance": 0.25, "ci_reduced": False}
    here = {"cpu": {"model": "this"}}
    path = tmp_path / "paper_check.json"
    path.write_text(json.dumps({"platform": here, "rows": [{**row, "ours": 0.75, "n": 10000}]}))
    claims = {"paper_claims": [{"method": "kmeans", "metric": "nmi", "within": 0.25},
                               {"method": "absent", "metric": "nmi", "within": 1.0}]}
    same, claim, absent = rp.paper_verdicts([row], path, claims, here)
    assert same == {"part": "paper", "what": "kmeans on mnist_test: nmi", "committed": 0.75, "ci": 0.5,
                    "tolerance": 0.25, "ok": True, "note": "same setting"}
    assert claim == {"part": "claim", "what": "kmeans nmi matches its paper", "committed": 0.75, "ci": 0.5,
                     "tolerance": 0.25, "ok": True, "note": "JULE Table 3"}
    assert absent == {"part": "claim", "what": "absent nmi matches its paper", "committed": None, "ci": None,
                      "tolerance": 1.0, "ok": False, "note": "not run"}
    (reduced,) = rp.paper_verdicts([{**row, "ci_reduced": True}], path, {}, here)
    assert reduced["ok"] and reduced["note"] == "reduced in CI: n 3000 vs 10000, epochs=2"
    (missing,) = rp.paper_verdicts([row], tmp_path / "absent.json", {}, here)
    assert missing == {"part": "paper", "what": "kmeans on mnist_test: nmi", "committed": None, "ci": 0.5,
                       "tolerance": 0.25, "ok": False, "note": "no committed row"}
    (other,) = rp.paper_verdicts([{**row, "ours": 0.25}], path, {"cross_cpu": {"v_measure": 0.05}},
                                 {"cpu": {"model": "other"}})
    assert other == {"part": "paper", "what": "kmeans on mnist_test: nmi", "committed": 0.75, "ci": 0.25,
                     "tolerance": 0.25, "ok": False,
                     "note": "same setting; committed on another CPU, and reproduce.cross_cpu has no paper"}
    (at_bound,) = rp.paper_verdicts([{**row, "ours": 0.25}], path, {"cross_cpu": {"paper": 0.5}},
                                    {"cpu": {"model": "other"}})
    assert at_bound["ok"] and at_bound["tolerance"] == 0.5       # the cross-CPU bound is inclusive too


def test_table_verdicts_of_several_rows_same_and_other_cpu_whole(tmp_path):
    """Two rows judged in one call (every row's verdicts kept), a row with no committed file (a failing
    verdict for each of its figures, not only the first), a figure exactly at its tolerance (holds), a
    figure the committed file lacks (the seed note kept), and the CPU: on the committing CPU a figure
    that misses its tolerance fails even where reproduce.cross_cpu would hold it; on another CPU it is
    held to cross_cpu, and keeps its own tolerance for a figure cross_cpu does not name (mutation
    testing: `out = verdicts`, `break` for `continue`, `<` for `<=`, the platform lookup and the
    notes all survived)."""
    metrics, timings = tmp_path / "metrics", tmp_path / "timings"
    metrics.mkdir(), timings.mkdir()
    here, other = {"cpu": {"model": "this"}}, {"cpu": {"model": "other"}}
    (metrics / "lm_c.json").write_text(json.dumps({"per_seed": {"seed0": {"v_measure": 0.5, "k_found": 40}}}))
    (timings / "lm_c.json").write_text(json.dumps({"platform": here}))

    def doc(run, platform):
        return {"method": run, "corpus": "c", "per_seed": {"seed0": {"v_measure": 0.75, "k_found": 50, "ari": 0.3}},
                "ci": {"reduced": False, "overrides": {}, "tolerance": 0.25, "platform": platform,
                       "figures": ["v_measure", "k_found", "ari"]}}
    cross = {"v_measure": 0.05, "k_found": 0.35}
    seed0 = "seed 0 vs committed seed 0"
    got = rp.table_verdicts([doc("lm", here), doc("ward", here)], metrics, cross)
    assert got == [
        {"part": "table", "what": "lm on c: v_measure", "tolerance": 0.25, "committed": 0.5, "ci": 0.75, "ok": True,
         "note": seed0},
        {"part": "table", "what": "lm on c: k_found", "tolerance": 0.25, "committed": 40, "ci": 50, "ok": False,
         "note": seed0},
        {"part": "table", "what": "lm on c: ari", "tolerance": 0.25, "committed": None, "ci": 0.3, "ok": False,
         "note": seed0 + ": the committed lm_c.json has no such figure"},
        *[{"part": "table", "what": f"ward on c: {key}", "tolerance": 0.25, "committed": None, "ci": value,
           "ok": False, "note": "no committed ward_c.json"} for key, value in (("v_measure", 0.75), ("k_found", 50),
                                                                              ("ari", 0.3))]]
    elsewhere = rp.table_verdicts([doc("lm", other)], metrics, cross)
    assert [(v["ok"], v["tolerance"]) for v in elsewhere] == [(True, 0.25), (True, 14.0), (False, 0.25)]
    assert elsewhere[1]["note"] == seed0 + "; committed on another CPU: held to reproduce.cross_cpu"
    (k,) = [v for v in rp.table_verdicts([doc("lm", other)], metrics, {"v_measure": 0.05}) if "k_found" in v["what"]]
    assert (k["ok"], k["tolerance"]) == (False, 0.25)
    assert k["note"] == seed0 + "; committed on another CPU, and reproduce.cross_cpu has no k_found"
