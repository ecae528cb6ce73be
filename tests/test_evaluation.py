"""Metrics on hand-computed cases, the evaluate stage end to end, the comparison table, the inventory."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from signclust.data.corpus import Corpus
from signclust.errors import UserError
from signclust.evaluation import evaluate as ev
from signclust.evaluation.metrics import clustering_accuracy, fixed_k_scores, purity, score
from signclust.models.base import ClusterResult, save_result
from signclust.reports import inventory, table


@pytest.fixture(autouse=True)
def no_mlflow(monkeypatch):
    monkeypatch.setenv("SIGNCLUST_MLFLOW", "0")


# -- metrics on known inputs -----------------------------------------------------------------------

def test_perfect_clustering_scores_one():
    gold = np.array([0, 0, 1, 1, 2, 2])
    s = score(gold, gold)
    for key in ("v_measure", "homogeneity", "completeness", "nmi", "ari", "acc", "purity"):
        assert s[key] == pytest.approx(1.0)
    assert s["k_found"] == s["k_true"] == 3


def test_score_names_every_figure():
    s = score(np.array([0, 0, 1, 1]), np.array([0, 0, 0, 1]))
    assert set(s) == {"v_measure", "homogeneity", "completeness", "nmi", "ari", "acc", "purity", "k_found", "k_true"}
    assert (s["k_found"], s["k_true"]) == (2, 2)


def test_permuted_labelling_is_still_perfect():
    gold = np.array([0, 0, 1, 1, 2, 2])
    pred = np.array([7, 7, 3, 3, 5, 5])
    s = score(gold, pred)
    assert s["acc"] == pytest.approx(1.0)
    assert s["v_measure"] == pytest.approx(1.0)


def test_rectangular_accuracy_and_purity_by_hand():
    # gold 2 classes, 3 found types. Contingency (gold x pred): [[2, 1, 0], [0, 1, 2]].
    # Best one-to-one map: g0->p0 (2) and g1->p2 (2): ACC = 4/6. Purity: (2 + 1 + 2)/6.
    gold = np.array([0, 0, 0, 1, 1, 1])
    pred = np.array([0, 0, 1, 1, 2, 2])
    assert clustering_accuracy(gold, pred) == pytest.approx(4 / 6)
    assert purity(gold, pred) == pytest.approx(5 / 6)
    # the other way round (K found < K true): 3 gold, 2 found; best map covers 2 + 2 of 6
    assert clustering_accuracy(pred, gold) == pytest.approx(4 / 6)


def test_accuracy_of_no_tokens_is_nan_not_an_error():
    with pytest.warns(RuntimeWarning):
        assert math.isnan(clustering_accuracy(np.array([], dtype=int), np.array([], dtype=int)))


def test_v_measure_from_entropies_2x2():
    gold = np.array([0, 0, 1, 1])
    pred = np.array([0, 0, 0, 1])
    ent = lambda *p: -sum(x * math.log(x) for x in p if x > 0)  # noqa: E731
    h_c, h_k = ent(0.5, 0.5), ent(0.75, 0.25)
    h_c_given_k = 0.75 * ent(2 / 3, 1 / 3)      # cluster 0 holds {0, 0, 1}; cluster 1 is pure
    h_k_given_c = 0.5 * ent(0.5, 0.5)           # class 0 all in cluster 0; class 1 split evenly
    hom, comp = 1 - h_c_given_k / h_c, 1 - h_k_given_c / h_k
    s = score(gold, pred)
    assert s["homogeneity"] == pytest.approx(hom)
    assert s["completeness"] == pytest.approx(comp)
    assert s["v_measure"] == pytest.approx(2 * hom * comp / (hom + comp))
    assert s["acc"] == pytest.approx(3 / 4)
    assert s["purity"] == pytest.approx(3 / 4)


def test_fixed_k_on_separated_blobs():
    from sklearn.datasets import make_blobs
    x, gold = make_blobs(n_samples=400, centers=20, n_features=8, cluster_std=0.05,
                         center_box=(-50, 50), random_state=0)
    out = fixed_k_scores(gold, x)
    assert out["fixed_k_v_at_ktrue"] == pytest.approx(1.0, abs=1e-9)
    assert set(out["fixed_k_per_k"]) == {"5", "10", "15", "20", "25", "30", "35"}
    assert fixed_k_scores(gold, x, offsets=(0,))["fixed_k_v_measure"] == pytest.approx(1.0)


# -- evaluate stage ------------------------------------------------------------------------------

def tiny_corpus(labelled: bool = True) -> Corpus:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(12, 48, 48), dtype=np.uint8)
    labels = list("AAAABBBBCCCC") if labelled else None
    return Corpus.from_arrays(images, labels=labels, text_ids=[i // 3 for i in range(12)],
                              meta={"name": "tiny"})


def blob_embedding(gold: np.ndarray, dims: int, seed: int) -> np.ndarray:
    """Well-separated class blobs, wider than pca_dims so the reduction is exercised."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(gold.max() + 1, dims)) * 20
    return centers[gold] + rng.normal(size=(len(gold), dims)) * 0.01


def test_evaluate_stage_end_to_end(tmp_path):
    corpus = tiny_corpus()
    corpus.save(tmp_path / "corpus")
    gold = corpus.labels()
    runs = tmp_path / "runs"
    seed_labels = {0: gold.copy(), 1: np.array([0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2])}
    for seed, labels in seed_labels.items():
        save_result(ClusterResult(labels, blob_embedding(gold, 70, seed)), runs / f"seed{seed}",
                    {"seconds": 1.0 + 2 * seed})
    out = tmp_path / "metrics" / "m_tiny.json"
    ev.main(["m", "tiny", "--corpus-dir", str(tmp_path / "corpus"), "--runs-dir", str(runs), "--out", str(out)])
    doc = json.loads(out.read_text())

    assert doc["n_seeds"] == 2 and doc["seeds"] == [0, 1] and doc["k_true"] == 3
    s1 = score(gold, seed_labels[1])
    for key in ("v_measure", "nmi", "ari", "acc", "purity"):
        values = [1.0, s1[key]]
        assert doc["mean"][key] == pytest.approx(np.mean(values), abs=1e-12)
        assert doc["std"][key] == pytest.approx(np.std(values, ddof=1), abs=1e-12)
    assert doc["per_seed"]["seed1"]["v_measure"] == pytest.approx(s1["v_measure"])
    # wall times are run-to-run noise: they never reach a metrics file (a DVC dependency of the reports)
    assert "seconds" not in doc["mean"] and "seconds" not in doc["per_seed"]["seed0"]
    # blobs: Ward recovers the classes at K_true for both seeds
    assert doc["mean"]["fixed_k_v_at_ktrue"] == pytest.approx(1.0)
    assert doc["embedding"] == {"dims": 70, "reduced_to": 12, "reduction": "pca"}   # 12 tokens bound PCA


def test_evaluate_needs_gold_labels(tmp_path):
    corpus = tiny_corpus(labelled=False)
    save_result(ClusterResult(np.zeros(12), np.zeros((12, 2))), tmp_path / "seed0")
    with pytest.raises(UserError, match="no gold labels"):
        ev.evaluate(corpus, tmp_path, ev.config({}))


def test_evaluate_without_runs_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no run folders"):
        ev.evaluate(tiny_corpus(), tmp_path, ev.config({}))


def _evaluate_cli(tmp_path, capsys):
    """Runs the stage's main on tmp_path/runs; -> (exit status, stderr lines, whether it wrote)."""
    out = tmp_path / "m_tiny.json"
    with pytest.raises(SystemExit) as stop:
        ev.main(["m", "tiny", "--corpus-dir", str(tmp_path / "corpus"), "--runs-dir", str(tmp_path / "runs"),
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return stop.value.code, [line for line in err.splitlines() if line.startswith("error")], out.exists()


@pytest.mark.parametrize("case", ["fewer labels", "more labels", "nan embedding", "inf embedding",
                                  "embedding rows"])
def test_evaluate_stage_refuses_a_run_that_does_not_fit_the_corpus(tmp_path, capsys, case):
    """A run folder whose assignment does not cover the corpus, or whose embedding holds NaN/inf or
    has another number of rows: one `error:` line naming the folder, exit 2, nothing written."""
    corpus = tiny_corpus()
    corpus.save(tmp_path / "corpus")
    gold = corpus.labels()
    good = tmp_path / "runs" / "seed0"
    save_result(ClusterResult(gold, blob_embedding(gold, 4, 0)), good)
    bad = tmp_path / "runs" / "seed1"
    emb = blob_embedding(gold, 4, 1)
    if case == "fewer labels":
        save_result(ClusterResult(gold[:11], emb[:11]), bad)
    elif case == "more labels":
        save_result(ClusterResult(np.r_[gold, 0], np.vstack([emb, emb[:1]])), bad)
    else:
        save_result(ClusterResult(gold, emb), bad)
        if case == "embedding rows":
            np.save(bad / "embedding.npy", emb[:10])           # edited by hand: 10 rows for 12 labels
        else:
            emb[3, 1] = np.nan if case == "nan embedding" else np.inf
            np.save(bad / "embedding.npy", emb)
    code, err, wrote = _evaluate_cli(tmp_path, capsys)
    assert code == 2 and not wrote
    assert len(err) == 1 and err[0].startswith("error: ") and str(bad) in err[0], err   # the status line aside
    expected = {"fewer labels": "11 assigned tokens, corpus has 12", "more labels": "13 assigned tokens",
                "nan embedding": "NaN or infinite", "inf embedding": "NaN or infinite",
                "embedding rows": "disagree on the number of tokens"}[case]
    assert expected in err[0]


def test_narrow_embedding_is_not_reduced():
    x, note = ev.reduce_embedding(np.ones((5, 3)), 64)
    assert x.shape == (5, 3) and note["reduction"] == "none"



# -- the scoring path, cases found by mutation testing (reports/mutation.md) ----------------------

def test_config_overlays_the_evaluate_section():
    assert ev.config({}) == ev.DEFAULTS
    assert ev.config({"evaluate": {"pca_dims": 7}}) == {**ev.DEFAULTS, "pca_dims": 7}
    assert ev.config({"evaluate": None, "other": {"pca_dims": 7}}) == ev.DEFAULTS


def test_seed_folders_are_numbered_folders_in_numeric_order(tmp_path):
    for name in ("seed10", "seed2", "seedx", "seed_3"):
        (tmp_path / name).mkdir()
    (tmp_path / "seed4").write_text("a file, not a run folder")
    assert ev.seed_folders(tmp_path) == [(2, tmp_path / "seed2"), (10, tmp_path / "seed10")]


def test_reduce_embedding_width_and_dtype():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 10)).astype(np.float32)
    same, note = ev.reduce_embedding(x, 10)                 # exactly max_dims wide: kept
    assert note == {"dims": 10, "reduced_to": 10, "reduction": "none"}
    assert same.dtype == np.float64 and np.array_equal(same, x.astype(np.float64))
    reduced, note = ev.reduce_embedding(x, 4)
    assert note == {"dims": 10, "reduced_to": 4, "reduction": "pca"} and reduced.shape == (20, 4)
    with pytest.raises(UserError, match=r"^embedding contains NaN or infinite values$"):
        ev.reduce_embedding(np.array([[0.0, np.nan]]), 4)


def test_reduce_embedding_pca_is_seeded():
    # wide enough for scikit-learn's randomized solver, whose result depends on the seed
    from sklearn.decomposition import PCA
    x = np.random.default_rng(1).normal(size=(510, 60))
    by_seed = {s: PCA(n_components=5, random_state=s).fit_transform(x) for s in (0, 3)}
    assert not np.array_equal(by_seed[0], by_seed[3])
    assert np.array_equal(ev.reduce_embedding(x, 5)[0], by_seed[0])            # seed 0 by default
    assert np.array_equal(ev.reduce_embedding(x, 5, seed=3)[0], by_seed[3])


def test_each_seed_is_reduced_with_its_own_seed_and_the_configured_offsets(tmp_path, monkeypatch):
    corpus = tiny_corpus()
    gold = corpus.labels()
    save_result(ClusterResult(gold, blob_embedding(gold, 6, 0)), tmp_path / "seed5")
    seeds = []
    original = ev.reduce_embedding
    monkeypatch.setattr(ev, "reduce_embedding", lambda e, d, seed=0: seeds.append(seed) or original(e, d, seed))
    cfg = {**ev.config({}), "fixed_k_offsets": [0, 1]}
    out = ev.evaluate_seed(gold, tmp_path / "seed5", cfg, 5)
    assert seeds == [5]
    assert set(out["fixed_k_per_k"]) == {"3", "4"} and out["fixed_k_per_k"]["3"] == 1.0   # K_true + 0, + 1


def test_summarise_skips_absent_keys_and_one_seed_has_no_spread():
    mean, std = ev.summarise({"seed0": {"v_measure": 0.5, "ari": 0.25}}, ddof=1, keys=("k_found", "v_measure", "ari"))
    assert mean == {"v_measure": 0.5, "ari": 0.25} and std == {"v_measure": 0.0, "ari": 0.0}
    mean, std = ev.summarise({"seed0": {"ari": 0.25}, "seed1": {"ari": 0.75}}, ddof=0, keys=("ari",))
    assert mean == {"ari": 0.5} and std == {"ari": 0.25}


def test_evaluate_names_the_corpus_it_cannot_score(tmp_path):
    save_result(ClusterResult(np.zeros(12), np.zeros((12, 2))), tmp_path / "seed0")
    tail = " has no gold labels for every token; evaluate needs a labelled (benchmark) corpus"
    unlabelled = tiny_corpus(labelled=False)
    for name, meta, expected in (("given", {"name": "tiny"}, "given"), ("", {"name": "tiny"}, "tiny"), ("", {}, "?")):
        unlabelled.meta = meta
        with pytest.raises(UserError) as err:
            ev.evaluate(unlabelled, tmp_path, ev.config({}), corpus_name=name)
        assert str(err.value) == f"corpus '{expected}'{tail}"


def test_evaluate_document_without_method_and_corpus_names(tmp_path, monkeypatch):
    gold = tiny_corpus().labels()
    save_result(ClusterResult(gold, blob_embedding(gold, 4, 0)), tmp_path / "seed7")
    seeds = []
    original = ev.reduce_embedding
    monkeypatch.setattr(ev, "reduce_embedding", lambda e, d, seed=0: seeds.append(seed) or original(e, d, seed))
    doc = ev.evaluate(tiny_corpus(), tmp_path, {**ev.config({}), "std_ddof": 0, "fixed_k_offsets": [0]})
    assert seeds == [7]                                 # seed7's embedding is reduced with seed 7
    assert set(doc) == {"method", "corpus", "n_seeds", "seeds", "n_tokens", "k_true", "std_ddof",
                        "fixed_k_offsets", "embedding", "mean", "std", "per_seed"}
    assert (doc["method"], doc["corpus"], doc["n_seeds"], doc["seeds"]) == ("", "", 1, [7])
    assert (doc["n_tokens"], doc["k_true"], doc["std_ddof"], doc["fixed_k_offsets"]) == (12, 3, 0, [0])


def test_missing_run_message_exactly(tmp_path):
    for run, corpus in (("ward", "c"), ("kmeans", "c"), ("ward", "d"), ("jule", "c")):
        folder = tmp_path / run / corpus / ("seed0" if run != "jule" else "empty")
        folder.mkdir(parents=True)
    head = "no run folders seed*/ under {}; train it first (signclust train {} c)"
    runs = tmp_path / "wrd" / "c"
    assert ev.missing_run_message(runs) == (head.format(runs, "wrd")
                                            + "; did you mean 'ward'? Trained on 'c': kmeans, ward.")
    runs = tmp_path / "zzz" / "c"
    assert ev.missing_run_message(runs) == head.format(runs, "zzz") + " Trained on 'c': kmeans, ward."
    runs = tmp_path / "zzz" / "e"
    assert ev.missing_run_message(runs) == head.format(runs, "zzz").replace("zzz c)", "zzz e)")
    runs = tmp_path / "nowhere" / "wrd" / "c"                           # no runs root at all
    assert ev.missing_run_message(runs) == head.format(runs, "wrd")

# -- comparison table ------------------------------------------------------------------------------

def metrics_doc(method, corpus, v, v_std, seconds=None):
    mean = {"v_measure": v, "nmi": 0.5, "ari": 0.25, "acc": 0.6, "purity": 0.7, "k_found": 12.0,
            "fixed_k_v_measure": 0.8}
    std = {k: 0.0 for k in mean} | {"v_measure": v_std}
    if seconds is not None:
        mean["seconds"], std["seconds"] = seconds, 0.5
    return {"method": method, "corpus": corpus, "n_seeds": 3, "k_true": 10, "n_tokens": 100,
            "mean": mean, "std": std}


def test_table_numbers_and_order(tmp_path):
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    docs = [metrics_doc("alpha", "cyp", 0.75, 0.25, seconds=12.34), metrics_doc("zeta", "cyp", 0.5, 0.125),
            metrics_doc("alpha", "lin", 0.3333, 0.0)]
    for d in docs:
        (metrics / f"{d['method']}_{d['corpus']}.json").write_text(json.dumps(d))
    text = table.build(metrics, tmp_path / "comparison.md", tmp_path / "fig.png", preferred=["zeta"])
    assert "## cyp" in text and "## lin" in text and "K true = 10" in text
    assert "**0.750 ± 0.250**" in text          # best V-measure of cyp in bold
    assert "0.500 ± 0.125" in text and "0.333 ± 0.000" in text
    assert "12.3 ± 0.5" in text and "12.0 ± 0.0" in text
    cyp = text.split("## cyp")[1].split("## lin")[0]
    assert cyp.index("| zeta |") < cyp.index("| alpha |")        # params order first
    zeta_row = next(line for line in cyp.splitlines() if line.startswith("| zeta |"))
    assert zeta_row.endswith("| – |")                            # no wall time recorded
    assert (tmp_path / "comparison.md").read_text() == text
    assert (tmp_path / "fig.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def platform_record(family: str, flags: str) -> dict:
    return {"cpu": {"model name": "AMD EPYC", "cpu family": family, "model": "1", "vector extensions": flags},
            "torch_cpu_capability": "AVX2", "torch_threads": 2}


def test_table_names_the_machine_each_row_was_fitted_on(tmp_path):
    # a reader whose dvc repro gives other figures sees which CPU (and whether bf16 hardware) gave each row
    metrics, timings = tmp_path / "metrics", tmp_path / "timings"
    metrics.mkdir(), timings.mkdir()
    bf16, avx2 = platform_record("26", "avx avx2 avx512_bf16 avx512f"), platform_record("25", "avx avx2 fma")
    seeds = {"seed0": {"seconds": 2.0, "resumed": False}}
    for method, corpus, plat in (("alpha", "cyp", bf16), ("alpha", "lin", avx2), ("zeta", "cyp", avx2),
                                 ("zeta", "lin", avx2), ("omega", "cyp", None)):
        (metrics / f"{method}_{corpus}.json").write_text(json.dumps(metrics_doc(method, corpus, 0.5, 0.0)))
        record = {"per_seed": seeds} | ({"platform": plat} if plat else {})
        (timings / f"{method}_{corpus}.json").write_text(json.dumps(record))
    text = table.build(metrics, tmp_path / "c.md", None, ["zeta", "alpha"], timings_dir=timings)
    section = text.split("## Machines")[1]
    assert section.splitlines()[4:] == [
        "- AMD EPYC (cpu family 25, model 1; torch AVX2; no bf16 hardware): zeta, alpha (lin)",
        "- AMD EPYC (cpu family 26, model 1; torch AVX2; bf16 hardware): alpha (cyp)",
        "- not recorded: omega"]
    assert "## Machines" not in table.build(metrics, tmp_path / "d.md", None, None)    # no timings read


def test_table_cli_corpora_keeps_only_those(tmp_path, monkeypatch):
    # the main job's report_main: `--corpora cypriot` writes cypriot's table, not every corpus's
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    for d in (metrics_doc("alpha", "cyp", 0.75, 0.25), metrics_doc("alpha", "lin", 0.3333, 0.0)):
        (metrics / f"{d['method']}_{d['corpus']}.json").write_text(json.dumps(d))
    monkeypatch.setattr(table, "REPO_ROOT", tmp_path)
    table.main(["--metrics-dir", str(metrics), "--out", str(tmp_path / "c.md"), "--figure", str(tmp_path / "c.png"),
                "--corpora", "cyp"])
    text = (tmp_path / "c.md").read_text()
    assert "## cyp" in text and "## lin" not in text and "| alpha | 3 | 0.750 ± 0.250 |" in text
    assert "Generated by `python -m signclust.reports.table --corpora cyp`" in text


def test_table_without_metrics_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no metrics files in"):
        table.build(tmp_path, tmp_path / "c.md", None, None)
    with pytest.raises(UserError, match="no metrics folder .*nosuch; run the evaluate stage first"):
        table.build(tmp_path / "nosuch", tmp_path / "c.md", None, None)
    # a misspelt corpus used to read "no metrics files" although the folder held some
    (tmp_path / "alpha_cyp.json").write_text(json.dumps(metrics_doc("alpha", "cyp", 0.5, 0.0)))
    with pytest.raises(UserError, match=r"no metrics of cypr in .* \(it has cyp\); check the corpus names"):
        table.build(tmp_path, tmp_path / "c.md", None, None, corpora=["cypr"])


def test_a_corrupt_metrics_or_timings_file_is_one_error_naming_it(tmp_path):
    """A metrics or timings file that is not JSON (a merge conflict, a truncated copy) was a
    JSONDecodeError traceback from `signclust report`, `tune-summary` and the suite report: now one
    UserError that names the file, where it stopped parsing and what to do."""
    from signclust.tuning import summary
    metrics, timings = tmp_path / "metrics", tmp_path / "timings"
    metrics.mkdir(), timings.mkdir()
    (metrics / "alpha_cyp.json").write_text(json.dumps(metrics_doc("alpha", "cyp", 0.5, 0.0)))
    (timings / "alpha_cyp.json").write_text('{"per_seed": {<<<<<<< HEAD')
    with pytest.raises(UserError, match=r"timings/alpha_cyp.json cannot be read as the train stage's timings "
                                        r"\(line 1 column 15: .*\); restore it"):
        table.build(metrics, tmp_path / "c.md", None, None, timings_dir=timings)
    (metrics / "beta_cyp.json").write_text("")
    with pytest.raises(UserError, match=r"beta_cyp.json cannot be read as the evaluate stage's metrics \(line 1 column 1"):
        table.build(metrics, tmp_path / "c.md", None, None)
    (metrics / "beta_cyp.json").write_text("[1, 2]")
    with pytest.raises(UserError, match=r"beta_cyp.json does not hold the evaluate stage's metrics \(a JSON list, not an object\)"):
        table.build(metrics, tmp_path / "c.md", None, None)
    assert not (tmp_path / "c.md").exists()
    studies = tmp_path / "studies"
    studies.mkdir()
    (studies / "lm_cyp_supervised.json").write_bytes(b"\xff\xfe")
    with pytest.raises(UserError, match="lm_cyp_supervised.json cannot be read as a tune summary; restore it"):
        summary.load_studies(studies)


def test_the_table_and_its_figure_are_written_together_or_not_at_all(tmp_path):
    """`signclust report` wrote the new table, then failed on a figure folder it could not write,
    leaving a table beside an old (or no) figure; now neither is written."""
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "alpha_cyp.json").write_text(json.dumps(metrics_doc("alpha", "cyp", 0.5, 0.0)))
    (tmp_path / "a_file").write_text("keep")
    with pytest.raises(OSError):
        table.build(metrics, tmp_path / "c.md", tmp_path / "a_file" / "c.png", None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "metrics"]
    table.build(metrics, tmp_path / "c.md", tmp_path / "figures" / "c.png", None)
    assert (tmp_path / "c.md").is_file() and (tmp_path / "figures" / "c.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == ["c.png"]


# -- inventory -------------------------------------------------------------------------------------

def glyph(kind: str, rng) -> np.ndarray:
    img = np.zeros((48, 48), dtype=np.uint8)
    off = rng.integers(-2, 3)
    if kind == "a":
        img[22 + off:26 + off, 8:40] = 255          # horizontal bar
    elif kind == "b":
        img[8:40, 22 + off:26 + off] = 255          # vertical bar
    else:
        for i in range(8, 40):
            img[i, max(0, i - 2 + off):i + 2 + off] = 255   # diagonal
    return img


@pytest.fixture
def inventory_case(tmp_path):
    """Sign a split over found types 0 and 2; type 1 merges b and c (purity 0.5)."""
    rng = np.random.default_rng(1)
    signs = list("aaaaaa" + "bbbccc" + "aaaa")
    found = [0] * 6 + [1] * 6 + [2] * 4
    images = np.stack([glyph(s, rng) for s in signs])
    corpus = Corpus.from_arrays(images, labels=signs, text_ids=[i // 2 for i in range(16)],
                                hands=[f"h{i % 3}" for i in range(16)])
    corpus.save(tmp_path / "corpus")
    save_result(ClusterResult(np.array(found), np.zeros((16, 2))), tmp_path / "run")
    inventory.main(["m", "toy", "--corpus-dir", str(tmp_path / "corpus"), "--run-dir", str(tmp_path / "run"),
                    "--out-dir", str(tmp_path / "inv")])
    return tmp_path / "inv"


def _inventory_data(page: str) -> dict:
    blob = re.search(r'<script type="application/json" id="inventory-data">(.*?)</script>', page, re.S).group(1)
    return json.loads(blob)


@pytest.mark.slow   # the L1 kernel compiles on first use without a numba cache
def test_inventory_html_is_self_contained_and_complete(inventory_case):
    page = (inventory_case / "m_toy.html").read_text()
    markup = re.sub(r"<script.*?</script>", "", page, flags=re.S)
    refs = re.findall(r'(?:src|href)="([^"]*)"', markup)
    assert refs and all(r.startswith("#") for r in refs)               # links inside the page only
    assert "<link" not in page and "http" not in markup and "fetch(" not in page
    data = _inventory_data(page)                                       # the rows are drawn from this
    assert [t["id"] for t in data["types"]] == [0, 1, 2]               # one per found type, largest first
    impure = [t["id"] for t in data["types"] if t["purity"] < data["impure_below"]]
    assert impure == [1] and data["types"][1]["purity"] == 0.5
    splits = page.split('id="splits"')[1].split('id="merges"')[0]
    assert 'data-search="a"' in splits and 'href="#t0"' in splits and 'href="#t2"' in splits
    merges = page.split('id="merges"')[1].split('id="detail"')[0]
    assert 'href="#t1"' in merges and ">b<" in merges and ">c<" in merges
    assert "3 / 3" in page                                            # K found / K true
    assert (inventory_case / "m_toy.png").read_bytes()[:4] == b"\x89PNG"


def test_inventory_medoid_and_diverse_strip():
    rng = np.random.default_rng(0)
    images = np.zeros((5, 4, 4), dtype=np.uint8)
    images[4] = 255                                     # one outlier; any of 0..3 is a medoid
    assert inventory.medoid(images, np.arange(5), 200, rng) in (0, 1, 2, 3)
    groups = np.array(["h1", "h1", "h1", "h2", "h3"])
    pick = inventory.diverse_pick(np.arange(5), groups, 3, rng, skip=-1)
    assert sorted(groups[pick]) == ["h1", "h2", "h3"]   # one per hand before repeating a hand


def test_inventory_without_gold_labels(tmp_path):
    rng = np.random.default_rng(2)
    corpus = Corpus.from_arrays(np.stack([glyph(s, rng) for s in "aabb"]))
    html_path, png_path = inventory.write_inventory(corpus, np.array([0, 0, 1, 1]), tmp_path,
                                                    {"method": "m", "corpus": "raw", "seed": 0}, inventory.DEFAULTS)
    page = html_path.read_text()
    data = _inventory_data(page)
    assert len(data["types"]) == 2 and not data["gold"] and 'id="splits"' not in page
    assert all(t["purity"] is None for t in data["types"])
    assert png_path.exists()


def test_inventory_of_a_partly_labelled_corpus_counts_the_labelled_tokens(tmp_path):
    # an epigrapher's known signs: labels on some tokens, "" on the rest (what the importer keeps)
    rng = np.random.default_rng(1)
    signs = list("aaaaaa" + "bbbccc" + "aaaa")
    known = [s if i not in (0, 12, 13, 14, 15) else "" for i, s in enumerate(signs)]   # type 2: no label at all
    found = np.array([0] * 6 + [1] * 6 + [2] * 4)
    corpus = Corpus.from_arrays(np.stack([glyph(s, rng) for s in signs]), labels=known,
                                text_ids=[i // 2 for i in range(16)])
    assert not corpus.has_labels
    html_path, png_path = inventory.write_inventory(corpus, found, tmp_path, {"method": "m", "corpus": "part", "seed": 0},
                                                    inventory.DEFAULTS)
    page = html_path.read_text()
    data = _inventory_data(page)
    assert data["gold"] and data["partial"]
    by_id = {t["id"]: t for t in data["types"]}
    assert by_id[0]["majority"] == "a" and by_id[0]["purity"] == 1.0 and by_id[0]["comp"] == [["a", 5]]
    assert by_id[1]["purity"] == 0.5 and by_id[2]["majority"] is None and by_id[2]["purity"] is None
    assert data["tokens"]["gold"].count(-1) == 5 and data["labels"] == ["a", "b", "c"]
    splits = page.split('id="splits"')[1].split('id="merges"')[0]
    assert 'data-search="a"' not in splits          # a's other tokens, in type 2, carry no label
    merges = page.split('id="merges"')[1].split('id="detail"')[0]
    assert 'href="#t1"' in merges and 'href="#t0"' not in merges
    assert "Only 11 of 16 tokens carry a gold label" in page and "11 of 16" in page
    from sklearn.metrics import v_measure_score     # their K found / K true and V-measure: 5 a | 3 b + 3 c
    v = v_measure_score(list("aaaaabbbccc"), [0] * 5 + [1] * 6)
    assert "<b>2 / 3</b><span>their K found / K true</span>" in page and f"<b>{v:.3f}</b>" in page
    assert png_path.read_bytes()[:4] == b"\x89PNG"


def test_sheet_labels_drop_the_words_every_label_shares_and_keep_the_end():
    greek = ["GREEK SMALL LETTER ALPHA", "GREEK CAPITAL LETTER ALPHA", "GREEK SMALL LETTER FINAL SIGMA"]
    assert inventory.short_labels(greek) == {"GREEK SMALL LETTER ALPHA": "SMALL ALPHA",
                                             "GREEK CAPITAL LETTER ALPHA": "CAPITAL ALPHA",
                                             "GREEK SMALL LETTER FINAL SIGMA": "SMALL FINAL SIGMA"}
    # nothing shared: the end of a long label, after an ellipsis, width characters in all
    got = inventory.short_labels(["CJK UNIFIED IDEOGRAPH-4EBA", "HIRAGANA LETTER A"], width=12)
    assert got == {"CJK UNIFIED IDEOGRAPH-4EBA": "…OGRAPH-4EBA", "HIRAGANA LETTER A": "…NA LETTER A"}
    assert all(len(v) <= 12 for v in got.values())
    # one label, or a label made of shared words only, is kept whole
    assert inventory.short_labels(["A"]) == {"A": "A"}
    assert inventory.short_labels(["X Y", "X Y Z"]) == {"X Y": "X Y", "X Y Z": "Z"}
