"""Inline CSS and JavaScript of the interactive sign inventory (reports/inventory/*.html).

The page is one file: the data (types, tokens, deduplicated token images as PNG data) sits in a
``<script type="application/json" id="inventory-data">`` block and the script below renders it.
No network, no libraries. Element ids and classes used by the tests: ``#types tbody tr.type``
(one row per shown type, ``data-type``), ``#q`` (search), ``#sort``, ``#low`` (impure filter),
``#shown``, ``#detail`` (the member panel; ``.member`` figures), ``#splits``, ``#merges``.
"""

CSS = r"""
:root { --ink: #1d232b; --muted: #6b6558; --line: #ece8de; --paper: #fbfaf7; --accent: #35608d;
        --ok: #2f7d6d; --mid: #c98b1c; --low: #b8412f; }
* { box-sizing: border-box; }
body { font: 15px/1.45 "Source Sans 3", "Segoe UI", Helvetica, Arial, sans-serif; color: var(--ink);
       background: var(--paper); margin: 0 auto; max-width: 1320px; padding: 1.5rem 2rem 4rem; }
h1 { font-size: 1.6rem; margin: 0 0 .4rem; font-weight: 600; }
h2 { font-size: 1.2rem; margin: 2.2rem 0 .6rem; border-bottom: 1px solid #ddd8cc; padding-bottom: .2rem; }
.summary { display: flex; flex-wrap: wrap; gap: .5rem 2rem; margin: .8rem 0; }
.summary div { display: flex; flex-direction: column; }
.summary b { font-size: 1.35rem; font-variant-numeric: tabular-nums; }
.summary span { color: var(--muted); font-size: .8rem; text-transform: uppercase; letter-spacing: .04em; }
.note { color: var(--muted); font-size: .88rem; max-width: 72rem; }
nav a { margin-right: 1.2rem; color: var(--accent); }
.controls { position: sticky; top: 0; z-index: 2; background: var(--paper); display: flex; flex-wrap: wrap;
            gap: .6rem 1.4rem; align-items: center; padding: .6rem 0; border-bottom: 1px solid #ddd8cc; }
.controls label { font-size: .88rem; color: var(--muted); }
.controls input[type=search] { font: inherit; padding: .25rem .5rem; width: 16rem; border: 1px solid #c9c3b5;
                                border-radius: 4px; background: #fff; }
.controls select { font: inherit; padding: .2rem .3rem; }
#shown { font-variant-numeric: tabular-nums; color: var(--muted); font-size: .88rem; }
table { border-collapse: collapse; width: 100%; }
th { text-align: left; font-weight: 600; font-size: .78rem; color: var(--muted); text-transform: uppercase;
     letter-spacing: .04em; border-bottom: 2px solid #ddd8cc; padding: .3rem .5rem; }
td { padding: .3rem .5rem; border-bottom: 1px solid var(--line); vertical-align: middle; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.type { cursor: pointer; }
tr.type:hover { background: #f3efe6; }
tr.type.match td.sign { background: #fff3c4; }
button.tlink { font: inherit; color: var(--accent); background: none; border: 0; padding: 0; cursor: pointer; white-space: nowrap;
               font-variant-numeric: tabular-nums; text-decoration: underline dotted; }
img.glyph { image-rendering: pixelated; background: #fff; }
img.ex { width: 56px; height: 56px; border: 1px solid #c9c3b5; border-radius: 3px; }
.strip img { width: 34px; height: 34px; margin-right: 2px; vertical-align: middle; }
.strip .more { color: var(--muted); font-size: .8rem; margin-left: .3rem; }
.sign { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: .92rem; }
.comp { color: var(--muted); font-size: .82rem; }
.purity { display: inline-flex; align-items: center; gap: .4rem; font-variant-numeric: tabular-nums; }
.bar { display: inline-block; width: 64px; height: 8px; background: #e4dfd3; border-radius: 4px; overflow: hidden; }
.bar i { display: block; height: 100%; }
.bar i.ok { background: var(--ok); } .bar i.mid { background: var(--mid); } .bar i.low { background: var(--low); }
.tag { display: inline-block; font-size: .68rem; font-weight: 600; letter-spacing: .03em; border-radius: .6rem;
       padding: 0 .4rem; border: 1px solid currentColor; }
.tag.mid { color: var(--mid); } .tag.low { color: var(--low); }
#detail { position: fixed; inset: 0; background: rgba(29, 35, 43, .45); display: none; z-index: 10; }
#detail.open { display: block; }
#detail .panel { position: absolute; inset: 3vh 3vw; background: var(--paper); border-radius: 6px;
                 box-shadow: 0 8px 40px rgba(0,0,0,.3); display: flex; flex-direction: column; }
#detail header { display: flex; align-items: baseline; gap: 1.2rem; padding: .8rem 1.2rem;
                 border-bottom: 1px solid #ddd8cc; flex-wrap: wrap; }
#detail header h3 { margin: 0; font-size: 1.25rem; }
#detail .body { overflow: auto; padding: .6rem 1.2rem 1.2rem; }
#detail .close { margin-left: auto; font: inherit; font-size: 1.1rem; border: 1px solid #c9c3b5; background: #fff;
                 border-radius: 4px; cursor: pointer; padding: .1rem .6rem; }
#detail h4 { margin: 1rem 0 .4rem; font-weight: 600; font-size: .95rem; }
.chips button { font: inherit; font-size: .85rem; margin: 0 .3rem .3rem 0; border: 1px solid #c9c3b5;
                background: #fff; border-radius: 1rem; padding: .05rem .6rem; cursor: pointer; }
.chips button.on { background: var(--accent); color: #fff; border-color: var(--accent); }
.members { display: flex; flex-wrap: wrap; gap: .5rem; }
figure.member { margin: 0; display: flex; flex-direction: column; align-items: center; width: 104px; }
figure.member img { width: 96px; height: 96px; border: 1px solid #ddd8cc; }
figure.member figcaption { font-size: .72rem; color: var(--muted); text-align: center; line-height: 1.25;
                           overflow-wrap: anywhere; }
figure.member figcaption b { color: var(--ink); font-weight: 600; }
a.t { color: var(--accent); font-variant-numeric: tabular-nums; }
.lists td { vertical-align: top; }
@media print {
  body { background: #fff; max-width: none; padding: 0; font-size: 10pt; }
  .controls, #detail, nav, noscript { display: none !important; }
  tr.type { break-inside: avoid; }
  tr.type:hover { background: none; }
  .bar { border: 1px solid #999; }
  .bar i { print-color-adjust: exact; -webkit-print-color-adjust: exact; }
  a.t, button.tlink { color: var(--ink); text-decoration: none; }
  h2 { break-after: avoid; }
}
"""

JS = r"""
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("inventory-data").textContent);
  const T = D.tokens, TYPES = D.types;
  const byId = new Map(TYPES.map(t => [t.id, t]));
  const src = i => "data:image/png;base64," + D.images[i];
  const esc = s => String(s).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  const label = k => (T.gold && T.gold[k] >= 0) ? D.labels[T.gold[k]] : null;
  const hand = k => (T.hand && T.hand[k] >= 0) ? D.hands[T.hand[k]] : "";
  const caption = k => "text " + D.texts[T.text[k]] + ", position " + T.pos[k] +
                       (label(k) !== null ? ", gold " + label(k) : "") + (hand(k) ? ", hand " + hand(k) : "");
  const level = p => p === null ? "" : (p >= D.impure_below ? "ok" : (p >= 0.5 ? "mid" : "low"));

  function img(k, cls) {
    return '<img class="glyph ' + cls + '" loading="lazy" src="' + src(T.img[k]) + '" alt="' + esc(caption(k)) +
           '" title="' + esc(caption(k)) + '">';
  }
  function purityCell(t) {
    if (t.purity === null) return "";
    const lv = level(t.purity);
    const tag = lv === "ok" ? "" : ' <span class="tag ' + lv + '">' + (lv === "low" ? "mixed" : "impure") + "</span>";
    return '<span class="purity"><span class="bar" aria-hidden="true"><i class="' + lv + '" style="width:' +
           (100 * t.purity).toFixed(0) + '%"></i></span>' + t.purity.toFixed(2) + tag + "</span>";
  }
  function row(t, rank, query) {
    const strip = t.strip.map(k => img(k, "")).join("");
    const more = t.size > t.strip.length + 1 ? '<span class="more">+' + (t.size - t.strip.length - 1) + "</span>" : "";
    const also = D.gold ? t.comp.slice(1, 4).map(c => esc(c[0]) + "&nbsp;" + c[1]).join(", ") +
                 (t.comp.length > 4 ? " +" + (t.comp.length - 4) + " more" : "") : "";
    const hit = query && t.comp.some(c => matches(c[0], query));
    let cells = '<td class="num">' + rank + '</td><td><button class="tlink" data-type="' + t.id + '">type ' + t.id +
                "</button></td><td>" + img(t.exemplar, "ex") + '</td><td class="num">' + t.size + "</td>";
    if (D.gold) cells += '<td class="sign">' + esc(t.majority ?? "–") + "</td><td>" + purityCell(t) +
                         '</td><td class="comp">' + also + "</td>";
    cells += '<td class="strip">' + strip + more + "</td>";
    return '<tr class="type' + (hit ? " match" : "") + '" id="t' + t.id + '" data-type="' + t.id + '">' + cells + "</tr>";
  }
  function matches(sign, q) {
    sign = String(sign).toLowerCase();
    return q.exact ? sign === q.text : sign.includes(q.text);
  }
  function query() {
    const raw = document.getElementById("q").value.trim().toLowerCase();
    if (!raw) return null;
    const exact = raw.length > 1 && raw.startsWith('"') && raw.endsWith('"');
    return {text: exact ? raw.slice(1, -1) : raw, exact: exact};
  }
  const SORTS = {
    size: (a, b) => b.size - a.size || a.id - b.id,
    size_asc: (a, b) => a.size - b.size || a.id - b.id,
    purity: (a, b) => (a.purity ?? 2) - (b.purity ?? 2) || b.size - a.size,
    purity_desc: (a, b) => (b.purity ?? -1) - (a.purity ?? -1) || b.size - a.size,
    sign: (a, b) => String(a.majority ?? "").localeCompare(String(b.majority ?? "")) || b.size - a.size,
    id: (a, b) => a.id - b.id,
  };
  function render() {
    const q = query();
    const low = document.getElementById("low");
    const onlyLow = low ? low.checked : false;
    let list = TYPES.slice().sort(SORTS[document.getElementById("sort").value] || SORTS.size);
    if (q) list = list.filter(t => t.comp.some(c => matches(c[0], q)) || ("type " + t.id) === q.text);
    if (onlyLow) list = list.filter(t => t.purity !== null && t.purity < D.impure_below);
    document.querySelector("#types tbody").innerHTML = list.map((t, i) => row(t, i + 1, q)).join("");
    document.getElementById("shown").textContent = "showing " + list.length + " of " + TYPES.length + " types";
  }

  // -- the member panel --------------------------------------------------------------------------
  let openType = null;
  function openDetail(id, sign) {
    const t = byId.get(id);
    if (!t) return;
    openType = id;
    const panel = document.getElementById("detail");
    const groups = new Map();
    for (const k of t.members) {
      const key = D.gold ? (label(k) ?? "") : "members";     // "": a member with no label
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(k);
    }
    const keys = D.gold ? t.comp.map(c => c[0]).concat(groups.has("") ? [""] : []) : Array.from(groups.keys());
    const chips = D.gold ? '<div class="chips">' + ['<button data-sign="">all ' + t.size + "</button>"].concat(
      t.comp.map(c => '<button data-sign="' + esc(c[0]) + '">' + esc(c[0]) + " " + c[1] + "</button>")).join("") + "</div>" : "";
    let body = chips;
    for (const key of keys) {
      if (sign && key !== sign) continue;
      const ks = groups.get(key) || [];
      body += "<h4>" + (D.gold ? (key === "" ? "no label" : 'gold <span class="sign">' + esc(key) + "</span>") : esc(key)) +
              " — " + ks.length +
              ' token(s)</h4><div class="members">' + ks.map(k =>
                '<figure class="member">' + img(k, "") + "<figcaption><b>" + esc(D.texts[T.text[k]]) + "</b> · pos " +
                T.pos[k] + (hand(k) ? "<br>" + esc(hand(k)) : "") + "</figcaption></figure>").join("") + "</div>";
    }
    panel.querySelector("h3").textContent = "type " + t.id;
    panel.querySelector(".facts").innerHTML = t.size + " tokens" + (D.gold ? " · majority <span class=\"sign\">" +
      esc(t.majority ?? "–") + "</span> · purity " + purityCell(t) : "") + " · exemplar " + img(t.exemplar, "ex");
    panel.querySelector(".body").innerHTML = body;
    panel.querySelectorAll(".chips button").forEach(b => {
      if ((b.dataset.sign || "") === (sign || "")) b.classList.add("on");
      b.addEventListener("click", () => openDetail(id, b.dataset.sign || null));
    });
    panel.classList.add("open");
    panel.querySelector(".close").focus();
    if (location.hash !== "#t" + id) history.replaceState(null, "", "#t" + id);
  }
  function closeDetail() {
    document.getElementById("detail").classList.remove("open");
    openType = null;
    if (location.hash) history.replaceState(null, "", location.pathname + location.search);
  }
  function fromHash() {
    const m = /^#t(-?\d+)$/.exec(location.hash);
    if (m) openDetail(Number(m[1]));
  }

  document.getElementById("q").addEventListener("input", render);
  document.getElementById("sort").addEventListener("change", render);
  const low = document.getElementById("low");
  if (low) low.addEventListener("change", render);
  document.querySelector("#types tbody").addEventListener("click", e => {
    const tr = e.target.closest("tr.type");
    if (tr) openDetail(Number(tr.dataset.type));
  });
  document.getElementById("detail").addEventListener("click", e => { if (e.target.id === "detail") closeDetail(); });
  document.querySelector("#detail .close").addEventListener("click", closeDetail);
  document.addEventListener("keydown", e => { if (e.key === "Escape" && openType !== null) closeDetail(); });
  window.addEventListener("hashchange", fromHash);
  document.querySelectorAll("[data-search]").forEach(a => a.addEventListener("click", e => {
    e.preventDefault();
    document.getElementById("q").value = '"' + a.dataset.search + '"';
    render();
    document.getElementById("types").scrollIntoView();
  }));
  render();
  fromHash();
})();
"""
