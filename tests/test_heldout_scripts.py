"""scripts/heldout_scripts.py: the suite's targets on scripts outside the scored suite."""
from __future__ import annotations

import importlib.util


from signclust.config import REPO_ROOT

spec = importlib.util.spec_from_file_location("heldout_scripts", REPO_ROOT / "scripts" / "heldout_scripts.py")
heldout = importlib.util.module_from_spec(spec)
spec.loader.exec_module(heldout)

TARGETS = {"margin_over": "ward_pixels", "margin": 0.05, "k_within": 0.2}


def test_table_and_verdicts_on_known_numbers():
    #       row: [(V, K found, seconds) per seed]
    table = {"x_free": {"k_true": 50, "lm": [(0.98, 55, 1.0), (0.96, 45, 3.0)],
                        "ward_pixels": [(0.90, 50, 0.1)] * 2, "ward_glyphs": [(0.91, 50, 0.1)] * 2},
             "x_hands": {"k_true": 100, "lm": [(0.80, 200, 2.0)] * 2,
                         "ward_pixels": [(0.77, 100, 0.1)] * 2, "ward_glyphs": [(0.70, 100, 0.1)] * 2}}
    text = heldout.markdown(table, [0, 1], ["x"], TARGETS)
    assert "| x_free | 50 | **0.970 ± 0.010** | 50 (+0%) | 0.900 | 0.910 | +0.070 | 2.0 |" in text
    assert "| x_hands | 100 | **0.800 ± 0.000** | 200 (+100%) | 0.770 | 0.700 | +0.030 | 2.0 |" in text
    assert "| 1/2 corpora; smallest margin +0.030 | x_hands (+0.030) |" in text
    assert "| 1/2 corpora; median absolute error 50% | x_hands (+100%) |" in text
    # each fit of lm apart, after the targets: a one-seed study is compared with the same seed of another
    assert text.split("## Each fit of `lm`")[1].strip().splitlines()[2:] == [
        "| x_free | 0 | 0.980 | 55 | 1 |", "| x_free | 1 | 0.960 | 45 | 3 |",
        "| x_hands | 0 | 0.800 | 200 | 2 |", "| x_hands | 1 | 0.800 | 200 | 2 |"]


def test_the_report_names_the_encoders_precision():
    # bf16 and float32 encoders give other fits (README, Paper tables in CI): a study says which it ran
    assert heldout.encoder_dtype({"encoder_precision": "fp32"}) == "float32"
    assert heldout.encoder_dtype({"encoder_precision": "bf16"}) == "bfloat16"
    table = {"x_free": {"k_true": 2, "lm": [(1.0, 2, 1.0)], "ward_pixels": [(0.9, 2, 0.1)], "ward_glyphs": [(0.9, 2, 0.1)]}}
    assert "`lm`'s encoder trained in float32 here" in heldout.markdown(table, [0], ["x"], TARGETS, dtype="float32")
    assert "encoder trained in" not in heldout.markdown(table, [0], ["x"], TARGETS)


def test_a_scored_script_is_refused(cli_error):
    cli_error(heldout.main, ["--scripts", "latin", "armenian"],
              "latin: part of the scored suite (prepare.suite.scripts), not held out")


def test_changes_are_read_as_yaml_named_in_the_table_and_need_their_own_out(cli_error):
    assert heldout.parse_changes(["refits=1", "w_lm=0.5", "skeleton=false"]) == {
        "refits": 1, "w_lm": 0.5, "skeleton": False}
    table = {"x_free": {"k_true": 50, "lm": [(0.98, 50, 1.0)], "ward_pixels": [(0.90, 50, 0.1)],
                        "ward_glyphs": [(0.91, 50, 0.1)]}}
    assert "`lm` changed by `refits: 1`." in heldout.markdown(table, [0], ["x"], TARGETS, {"refits": 1})
    for argv, message in ((["--set", "refits=1"], "--set, --regimes, --tokens or --typefaces make another study than "
                                                  "reports/heldout_scripts.md: give it its own --out"),
                          (["--set", "refits"], "--set 'refits': expected KEY=VALUE, e.g. --set refits=1"),
                          (["--set", "refits=-1", "--out", "x.md"], "refits")):
        cli_error(heldout.main, argv, message)


def test_a_subset_of_regimes_is_named_and_needs_its_own_out(cli_error):
    table = {"x_free": {"k_true": 50, "lm": [(0.98, 50, 1.0)], "ward_pixels": [(0.90, 50, 0.1)],
                        "ward_glyphs": [(0.91, 50, 0.1)]}}
    assert "in the regime free and kept out" in heldout.markdown(table, [0], ["x"], TARGETS, regimes=("free",))
    assert "in all three regimes and kept out" in heldout.markdown(table, [0], ["x"], TARGETS)
    cli_error(heldout.main, ["--regimes", "free"], "--set, --regimes, --tokens or --typefaces make another study than "
                                                   "reports/heldout_scripts.md: give it its own --out")


def test_another_corpus_size_is_named_built_and_needs_its_own_out(cli_error, tmp_path, monkeypatch):
    table = {"x_free": {"k_true": 50, "lm": [(0.98, 50, 1.0)], "ward_pixels": [(0.90, 50, 0.1)],
                        "ward_glyphs": [(0.91, 50, 0.1)]}}
    assert "in all three regimes, 1000 tokens each (`--tokens`" in heldout.markdown(
        table, [0], ["x"], TARGETS, tokens=1000)
    assert "1000 tokens each (`--tokens`; the suite's corpora have 2500)" in heldout.markdown(
        table, [0], ["x"], TARGETS, tokens=1000, suite_tokens=2500)
    cli_error(heldout.main, ["--tokens", "1000"], "--set, --regimes, --tokens or --typefaces make another study than "
                                                   "reports/heldout_scripts.md: give it its own --out")
    cli_error(heldout.main, ["--tokens", "0", "--out", str(tmp_path / "x.md")],
              "suite n_tokens and max_len must be positive")
    fitted = []
    monkeypatch.setattr(heldout, "fit_row", lambda *a, **k: fitted.append(a) or (1.0, 1, 0.0))
    # the second script is too short: refused before any corpus is fitted
    cli_error(heldout.main, ["--scripts", "armenian", "ethiopic", "--regimes", "free", "--tokens", "6000",
                             "--out", str(tmp_path / "x.md")], "(amh) has 4114 signs; n_tokens=6000 asks for more")
    assert fitted == [] and not (tmp_path / "x.md").exists()


def test_given_typefaces_let_a_suite_script_in_and_draw_every_corpus(cli_error, tmp_path, monkeypatch, capsys):
    table = {"x_hands": {"k_true": 50, "lm": [(0.98, 50, 1.0)], "ward_pixels": [(0.90, 50, 0.1)],
                         "ward_glyphs": [(0.91, 50, 0.1)]}}
    assert "drawn with the typefaces `A.ttf`, `B.ttf` (`--typefaces`) that no corpus of the scored suite uses" in \
        heldout.markdown(table, [0], ["x"], TARGETS, typefaces=["A.ttf", "B.ttf"])
    out = str(tmp_path / "x.md")
    cli_error(heldout.main, ["--scripts", "latin", "--regimes", "hands", "handwriting", "--typefaces", "DejaVuSans.ttf",
                             "NotoSans-Bold.ttf", "--out", out], "latin: its handwriting is drawn with the Hershey")
    cli_error(heldout.main, ["--scripts", "latin", "--typefaces", "DejaVuSans.ttf", "DejaVuSans.ttf", "--out", out],
              "--typefaces: give at least two different font files")
    cli_error(heldout.main, ["--scripts", "latin", "--typefaces", "DejaVuSans.ttf", "NotoSans-Bold.ttf"],
              "--set, --regimes, --tokens or --typefaces make another study than reports/heldout_scripts.md")
    hands = []
    monkeypatch.setattr(heldout, "fit_row", lambda row, corpus, *a, **k: hands.append(set(corpus.tokens["hand"]))
                        or (1.0, 1, 0.0))
    heldout.main(["--scripts", "latin", "--regimes", "free", "--seeds", "0", "--tokens", "200", "--typefaces",
                  "DejaVuSans.ttf", "NotoSans-Bold.ttf", "--out", out])
    assert hands and all(h == {"DejaVuSans", "NotoSans-Bold"} for h in hands)
    assert "`DejaVuSans.ttf`, `NotoSans-Bold.ttf` (`--typefaces`)" in (tmp_path / "x.md").read_text()
    printed = [line for line in capsys.readouterr().out.splitlines() if " seed 0: " in line]
    assert [line.split(" of ")[0] for line in printed] == [        # one progress line a fit, as it ends
        f"latin_free {row} seed 0: V 1.000, K 1" for row in heldout.ROWS]
    assert all(line.endswith(", 0 s") for line in printed)
