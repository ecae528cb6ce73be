"""scripts/two_typeface_check.py: the suite's free targets on corpora of two typefaces."""
from __future__ import annotations

import importlib.util

from signclust.config import REPO_ROOT, section
from signclust.data import suite

spec = importlib.util.spec_from_file_location("two_typeface_check", REPO_ROOT / "scripts" / "two_typeface_check.py")
two = importlib.util.module_from_spec(spec)
spec.loader.exec_module(two)

TARGETS = {"margin_over": "ward_pixels", "margin": 0.05, "k_within": 0.2}


def test_every_pair_of_the_configured_fonts_once():
    assert two.font_pairs(["a.ttf", "b.ttf", "c.ttf"]) == [("a.ttf", "b.ttf"), ("a.ttf", "c.ttf"), ("b.ttf", "c.ttf")]
    assert two.font_pairs(["a.ttf", "b.ttf"]) == [("a.ttf", "b.ttf")]


def test_the_built_corpus_draws_the_two_fonts_only_and_params_stay_as_they_were():
    prepare = section("prepare")
    prepare["suite"]["n_tokens"] = 300
    fonts = list(prepare["suite"]["fonts"]["latin"])
    assert len(fonts) == 3
    changed = two.with_fonts(prepare, "latin", (fonts[0], fonts[2]))
    assert prepare["suite"]["fonts"]["latin"] == fonts                   # a copy: the caller's params untouched
    hands = suite.build("latin_free", changed).tokens["hand"]
    assert set(hands) == {fonts[0].rsplit(".", 1)[0], fonts[2].rsplit(".", 1)[0]}


def test_table_and_verdicts_on_known_numbers():
    rows = [{"name": "latin_free", "script": "latin", "fonts": ("A.ttf", "B.ttf"), "k_true": 40,
             "v": [0.99, 0.97], "k": [44, 40], "ref_v": 0.90},
            {"name": "armenian_free", "script": "armenian", "fonts": ("A.ttf", "C.ttf"), "k_true": 60,
             "v": [0.96, 0.96], "k": [90, 90], "ref_v": 0.93, "all_fonts": True}]
    text = two.markdown(rows, [0, 1], TARGETS, 0.97)
    assert "| latin_free | A + B | 40 | 0.980 ± 0.010 | 42 (+5%) | 0.900 | +0.080 |" in text
    assert "| armenian_free † ‡ | A + C | 60 | 0.960 ± 0.000 | 90 (+50%) | 0.930 | +0.030 |" in text
    assert "| native V ≥ 0.97 | 1/2 corpora; lowest 0.960 | armenian_free (0.960) |" in text
    assert "| 1/2 corpora; smallest margin +0.030 | armenian_free (+0.030) |" in text
    assert "| 1/2 corpora; median absolute error 28% | armenian_free (+50%) |" in text
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert len({line.count("|") for line in table[:4]}) == 1


def test_an_unknown_script_and_another_study_without_its_own_out_are_refused(cli_error):
    cli_error(two.main, ["--scripts", "klingon", "--out", "x.md"],
              "klingon: not a script the suite builder knows")
    cli_error(two.main, ["--scripts", "latin"], "--scripts, --seeds or --typefaces make another study than "
                                                "reports/two_typeface_check.md: give it its own --out")


def test_given_typefaces_are_named_and_checked(cli_error):
    rows = [{"name": "latin_free", "script": "latin", "fonts": ("A.ttf", "B.ttf"), "k_true": 40,
             "v": [0.99], "k": [40], "ref_v": 0.90}]
    assert "drawn from `A.ttf`, `B.ttf` (`--typefaces`), not from" in two.markdown(
        rows, [0], TARGETS, 0.97, typefaces=["A.ttf", "B.ttf"])
    assert "--typefaces" not in two.markdown(rows, [0], TARGETS, 0.97)
    cli_error(two.main, ["--typefaces", "A.ttf", "A.ttf", "--out", "x.md"],
              "--typefaces: give at least two different font files")
    cli_error(two.main, ["--typefaces", "A.ttf", "B.ttf"], "--scripts, --seeds or --typefaces make another study")
    cli_error(two.main, ["--scripts", "latin", "--typefaces", "NoSuchFont.ttf", "NotoSans-Regular.ttf",
                         "--out", "x.md"], "font NoSuchFont.ttf not found")
