"""The interactive sign inventory in a real browser (headless Chromium over the DevTools protocol):
rendered types, sorting, search, the member panel opened by a click, links from the merge list.
Skipped, with the reason, where no Chromium is installed (apt-get install chromium)."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from _cdp import Browser, find_browser
from signclust.reports import inventory

BROWSER = find_browser()
needs_browser = pytest.mark.skipif(BROWSER is None, reason="no Chromium/Chrome on PATH (apt-get install chromium)")


def _page(tiny_corpus, tmp_path, duplicates=0):
    corpus = tiny_corpus(n_types=4, per_type=6, n_texts=3, duplicates=duplicates)
    gold = corpus.labels()
    found = gold.copy()
    found[gold == 3] = 2                       # types 2 merges two signs: purity 0.5
    found[np.flatnonzero(gold == 0)[:3]] = 5   # sign 0 split over types 0 and 5
    html_path, png_path = inventory.write_inventory(corpus, found, tmp_path, {"method": "m", "corpus": "tiny", "seed": 0},
                                                    inventory.DEFAULTS)
    return corpus, found, html_path


def _data(page: str) -> dict:
    blob = re.search(r'<script type="application/json" id="inventory-data">(.*?)</script>', page, re.S).group(1)
    return json.loads(blob)


def test_page_is_self_contained_with_one_png_per_distinct_image(tiny_corpus, tmp_path):
    corpus, found, html_path = _page(tiny_corpus, tmp_path, duplicates=4)   # 4 tokens repeat an image
    page = html_path.read_text()
    assert not re.search(r'(?:src|href)="(?:https?:)?//', page) and "<link" not in page
    assert "@media print" in page
    data = _data(page)
    assert len(data["types"]) == len(np.unique(found)) == 4
    assert len(data["images"]) == len(corpus.images) == corpus.n_tokens - 4   # one PNG per distinct image
    assert all(img.startswith("iVBORw0KGgo") for img in data["images"])       # base64 of a PNG
    t2 = next(t for t in data["types"] if t["id"] == 2)
    assert t2["purity"] == pytest.approx(0.5, abs=0.1) and t2["size"] == len(t2["members"]) == (found == 2).sum()
    k = t2["members"][0]
    assert data["texts"][data["tokens"]["text"][k]] == corpus.tokens["text_id"][k]
    assert data["tokens"]["pos"][k] == corpus.tokens["position"][k]


@needs_browser
def test_inventory_in_chromium_renders_sorts_searches_and_opens_members(tiny_corpus, tmp_path):
    corpus, found, html_path = _page(tiny_corpus, tmp_path)
    with Browser(BROWSER) as b:
        b.open(html_path.as_uri())
        b.wait("document.querySelectorAll('#types tbody tr.type').length > 0")
        assert b.eval("document.querySelectorAll('#types tbody tr.type').length") == 4
        assert b.eval("document.getElementById('shown').textContent") == "showing 4 of 4 types"
        # every strip image is its own data-URI PNG captioned with text id and position
        titles = b.eval("[...document.querySelectorAll('#types .strip img')].map(i => i.title)")
        assert titles and all(re.match(r"text T\d, position \d+, gold \w+", t) for t in titles)

        # sort by purity: the merged type (0.5) comes first
        b.eval("const s = document.getElementById('sort'); s.value = 'purity'; s.dispatchEvent(new Event('change'))")
        assert b.eval("document.querySelector('#types tbody tr.type').dataset.type") == "2"
        # search a gold label: only the types holding it
        sign = corpus.tokens["label"][found == 5].iloc[0]
        b.eval(f"const q = document.getElementById('q'); q.value = '\"{sign}\"'; q.dispatchEvent(new Event('input'))")
        assert sorted(b.eval("[...document.querySelectorAll('#types tbody tr.type')].map(r => r.dataset.type)")) == ["0", "5"]
        b.eval("const q2 = document.getElementById('q'); q2.value = ''; q2.dispatchEvent(new Event('input'))")

        # click a type: its panel lists every member at full size with text id and position
        b.click("#types tbody tr.type[data-type='2'] button.tlink")
        b.wait("document.getElementById('detail').classList.contains('open')")
        assert b.eval("document.querySelectorAll('#detail figure.member').length") == 12
        assert b.eval("document.querySelector('#detail figure.member img').getBoundingClientRect().width") >= 48
        caps = b.eval("[...document.querySelectorAll('#detail figcaption')].map(c => c.textContent)")
        members = np.flatnonzero(found == 2)
        expected = {f"{corpus.tokens['text_id'][k]} · pos {corpus.tokens['position'][k]}" for k in members}
        assert {c.split("hand")[0].strip() for c in caps} == expected
        assert b.eval("location.hash") == "#t2"
        b.eval("document.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape'}))")
        assert not b.eval("document.getElementById('detail').classList.contains('open')")

        # the merge list links to its type's panel
        b.click("#merges a.t")
        b.wait("document.getElementById('detail').classList.contains('open')")
        assert b.eval("document.querySelector('#detail h3').textContent") == "type 2"


@needs_browser
def test_a_partly_labelled_inventory_in_chromium_shows_dashes_and_unlabelled_members(tiny_corpus, tmp_path):
    # the labels of sign 1 and of half of sign 0's tokens are blank, as an epigrapher's partial sign list
    corpus = tiny_corpus(n_types=4, per_type=6, n_texts=3)
    gold = corpus.labels()
    blank = (gold == 1) | np.isin(np.arange(len(gold)), np.flatnonzero(gold == 0)[:3])
    corpus.tokens.loc[blank, "label"] = ""
    html_path, _ = inventory.write_inventory(corpus, gold, tmp_path, {"method": "m", "corpus": "part", "seed": 0},
                                             inventory.DEFAULTS)
    with Browser(BROWSER) as b:
        b.open(html_path.as_uri())
        b.wait("document.querySelectorAll('#types tbody tr.type').length > 0")
        signs = b.eval("Object.fromEntries([...document.querySelectorAll('#types tbody tr.type')]"
                       ".map(r => [r.dataset.type, r.querySelector('td.sign').textContent]))")
        assert signs["1"] == "–" and signs["0"] == corpus.tokens["label"][np.flatnonzero(gold == 0)[3]]
        # type 0's panel: its 3 labelled members under their sign, the other 3 under "no label"
        b.click("#types tbody tr.type[data-type='0'] button.tlink")
        b.wait("document.getElementById('detail').classList.contains('open')")
        heads = b.eval("[...document.querySelectorAll('#detail h4')].map(h => h.textContent)")
        assert len(heads) == 2 and heads[1] == "no label — 3 token(s)" and heads[0].endswith("— 3 token(s)")
        assert b.eval("document.querySelectorAll('#detail figure.member').length") == 6
        assert "null" not in b.eval("document.body.innerText")
