"""CI-sized reproduction of the committed tables (reports/comparison.md, reports/paper_check.md).

    python -m signclust.reports.reproduce                  # both -> reports/ci/
    python -m signclust.reports.reproduce --only table     # or: --only paper

What runs (params.yaml ``reproduce``):
  table   the rows ``reproduce.rows.<corpus>: [run, ...]`` of the comparison table, rebuilt from
          nothing in a scratch folder by the stages' own functions (prepare -> distances -> train ->
          evaluate) for ``reproduce.seeds``; the runs under ``reproduce.first_seed_only.<corpus>``
          for the first seed alone (slow rows: the test suite has a time budget). A run listed
          under ``reproduce.reduced`` runs with that block's parameter overrides (a slow method
          made CI-sized).
  paper   every check of reports/paper_check.md at ``--scale ci`` (see signclust.reports.paper_check).

How a reproduced figure is judged against the committed full-size one:
  same setting  every figure of ``reproduce.figures`` (native V, fixed-K V, K found, ARI) of every
                reproduced seed against the committed figure *of the same seed*, within
                ``reproduce.tolerance`` (table) or ``paper_check.ci.tolerance`` (paper): fits are
                deterministic given the seed, the thread count and the CPU.
  another CPU   where the committed figure was made on another CPU (its ``platform`` record in
                reports/timings/<run>_<corpus>.json or reports/paper_check.json differs from this
                machine's, or is absent), a figure outside that tolerance is held to
                ``reproduce.cross_cpu`` instead: torch's kernels round differently on another
                instruction set and a trained network drifts to another, equally likely result.
                The verdict says so; the claims below are held as they are.
  another precision  lm's encoder trains in bf16 where the CPU multiplies it in hardware
                (AVX512-BF16 or AMX; ``encoder_precision: auto``) and in float32 elsewhere: another
                computation, not another rounding (README, *Paper tables in CI*). Where the
                committed fit's precision differs from this machine's and
                ``reproduce.references.<this precision>`` (a folder under reports/) holds the row,
                the row is judged against that reference: the same rows fitted at the committed
                settings on a CPU of this precision (``--write-reference`` makes it), as above
                (same CPU: ``tolerance``; another: ``cross_cpu``); a figure that misses the
                reference holds where it holds against the committed fit. The note says which.
                A reference is read only by a run of the code, settings and corpus it was
                written from (``fit_stamp``, kept in its timings/ record); a stale one is not.
  reduced       the committed mean over seeds of the figures the reduction names (``figures``,
                default native V), within the tolerance stated next to the reduction.
  claims        the statements the README makes, checked on the CI figures: V(a) - V(b) >= margin
                on a corpus, the number of types found within a share of the true one, a paper
                figure matched within a distance.

    python -m signclust.reports.reproduce --write-reference   # this precision's reference rows
    # the float32 rows on a CPU with bf16 hardware: capped to AVX2, it computes an AVX2-only CPU's fits
    ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 python -m signclust.reports.reproduce --write-reference

Writes reports/ci/comparison.md (+ metrics/*.json), reports/ci/paper_check.md (+ .json) and the
verdicts in reports/ci/reproduction.md (+ .json); exits 1 when a verdict fails. The tests in
tests/test_reproduce.py run this and assert every verdict, so `.ci/run` regenerates the tables.
The table part needs only the built-in corpora's sources; the paper part needs MNIST and
Fashion-MNIST (``missing_paper_data`` says what is absent and how to get it).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from signclust.config import REPO_ROOT, deep_update, load_params, numeric_platform
from signclust.errors import UserError, cli_main
from signclust.io import atomic_write_text, write_json

PARTS = ("table", "paper")
# the figures of a reproduced row compared seed by seed (params.yaml reproduce.figures overrides)
FIGURES = ("v_measure", "fixed_k_v_measure", "k_found", "ari")
# |CI - committed| for the same seed and setting when params.yaml gives no reproduce.tolerance
TOLERANCE = 0.001


def table_rows(cfg: dict) -> list[tuple[str, str]]:
    """(run, corpus) pairs of ``reproduce.rows``, corpus by corpus."""
    return [(run, corpus) for corpus, runs in (cfg.get("rows") or {}).items() for run in runs or []]


def reduced_params(params: dict, run: str, reduction: dict | None) -> dict:
    """params with the run's CI overrides folded into its row of `runs`."""
    if not reduction:
        return params
    params = copy.deepcopy(params)
    spec = params["runs"][run] = dict(params["runs"].get(run) or {})
    spec["params"] = deep_update(spec.get("params") or {}, reduction.get("params") or {})
    return params


def fit_stamp(run: str, params: dict, corpus) -> str:
    """sha256 of what a row's fits are made from: their checkpoint key (``checkpoint.fit_key``: the
    method's code, its resolved parameters, the corpus's images and tokens) without the seed. A
    precision reference is read only by a run whose stamp is the one it was written with."""
    from signclust.models.base import FitContext, get_clusterer
    from signclust.models.checkpoint import fit_key
    from signclust.models.train import run_config
    method, run_params, _ = run_config(run, params)
    key = fit_key(get_clusterer(method, **run_params), corpus, FitContext())
    del key["context"]                       # the seed, K and device: the same rows at every seed
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def reproduce_table(params: dict, cfg: dict, out: Path, progress: bool = False,
                    only: list[tuple[str, str]] | None = None) -> list[dict]:
    """Fit and evaluate every row (``only``: those of them) in a scratch folder; the metrics
    documents go to out/metrics/."""
    from signclust.data.corpus import Corpus
    from signclust.data.prepare import build
    from signclust.distances.stage import compute
    from signclust.evaluation import evaluate as ev
    from signclust.models.train import train

    rows = table_rows(cfg)
    unknown = sorted({run for run, _ in rows} - set(params.get("runs") or {}))
    if unknown:
        raise UserError(f"reproduce.rows names runs that params.yaml `runs` lacks: {', '.join(unknown)}")
    seeds = [int(s) for s in cfg.get("seeds", [0])]
    first_only = {corpus: set(runs or []) for corpus, runs in (cfg.get("first_seed_only") or {}).items()}
    configured = set(rows)
    stray = sorted(f"{run} on {corpus}" for corpus, runs in first_only.items() for run in runs
                   if (run, corpus) not in configured)
    if stray:
        raise UserError(f"reproduce.first_seed_only names rows that reproduce.rows lacks: {', '.join(stray)}")
    if only is not None:
        wanted = set(only)
        rows = [row for row in rows if row in wanted]
    eval_cfg = ev.config(params)
    dist = params["distances"]
    platform = run_platform()                 # this machine, under the reproduction's thread count
    docs = []
    with tempfile.TemporaryDirectory(prefix="signclust-ci-") as scratch:
        work = Path(scratch)
        built: dict[str, Corpus] = {}
        for run, name in rows:
            corpus_dir, dist_dir = work / "corpora" / name, work / "distances" / name
            if name not in built:
                t0 = time.time()
                corpus = build(name, params["prepare"], progress=progress)
                corpus.save(corpus_dir)
                dist_dir.mkdir(parents=True)
                compute(np.asarray(corpus.images), int(dist["k"]), int(dist["dense_max_images"]),
                        int(dist["chunk_rows"]), dist_dir, progress=progress)
                built[name] = Corpus.load(corpus_dir)
                print(f"{name}: built in {time.time() - t0:.1f}s", flush=True)
            reduction = (cfg.get("reduced") or {}).get(run)
            t0 = time.time()
            run_seeds = seeds[:1] if run in first_only.get(name, ()) else seeds
            run_params = reduced_params(params, run, reduction)
            train(run, name, run_seeds, run_params, corpus_dir, dist_dir,
                  out_root=work / "runs", ckpt_root=None, progress=progress, experiment="reproduce")
            doc = ev.evaluate(built[name], work / "runs" / run / name, eval_cfg, run, name)
            doc["ci"] = {"reduced": bool(reduction), "overrides": (reduction or {}).get("params", {}),
                         "tolerance": float((reduction or {}).get("tolerance", cfg.get("tolerance", TOLERANCE))),
                         "figures": list((reduction or {}).get("figures", ["v_measure"]) if reduction
                                         else cfg.get("figures", FIGURES)),
                         "seconds": time.time() - t0, "platform": platform,
                         "stamp": fit_stamp(run, run_params, built[name])}
            write_json(ev.metrics_path(out, run, name), doc)
            docs.append(doc)
    return docs


def committed_figure(committed: dict, seed: int | None, key: str) -> float | None:
    """The committed figure of one seed, or the mean over seeds when ``seed`` is None."""
    if seed is None:
        return committed["mean"].get(key)
    return (committed.get("per_seed") or {}).get(f"seed{seed}", {}).get(key)


def timings_record(path: Path) -> dict:
    """A committed timings or paper-check file ({}: absent)."""
    return json.loads(path.read_text()) if path.exists() else {}


# environment variables that cap the instruction set torch, MKL and oneDNN choose their kernels from.
# Under ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 an AMD EPYC with AVX-512 gave the
# lm fits of an AVX2-only AMD EPYC to the last digit (README, Paper tables in CI: the float32 reference).
KERNEL_CAP_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


def run_platform() -> dict:
    """This machine's ``numeric_platform`` record, with the kernel caps set in the environment
    (``kernel_caps``; only when one is set, so that an uncapped run's record is the train stage's):
    a capped run computes other figures than the same CPU uncapped, and trains lm's encoder in
    float32 under a oneDNN cap below bf16 (``encoder_precision``)."""
    record = numeric_platform()
    caps = {k: os.environ[k] for k in KERNEL_CAP_VARIABLES if os.environ.get(k)}
    return {**record, "kernel_caps": caps} if caps else record


def committed_platform(path: Path) -> dict | None:
    """The ``platform`` record of a committed timings or paper-check file (None: absent)."""
    return timings_record(path).get("platform")


def encoder_precision(platform: dict | None) -> str | None:
    """The precision ``encoder_precision: auto`` trains lm's encoder in on the CPU a platform record
    describes: "bf16" where it has AVX512-BF16 or AMX and the record keeps no oneDNN cap below them
    (its ``kernel_caps``; visual_encoder.native_bf16), else "fp32"; None without a record."""
    from signclust.models.visual_encoder import _ISA_CAPS_WITHOUT_BF16
    if not platform:
        return None
    caps = platform.get("kernel_caps") or {}
    if (caps.get("ONEDNN_MAX_CPU_ISA") or caps.get("DNNL_MAX_CPU_ISA") or "").strip().upper() in _ISA_CAPS_WITHOUT_BF16:
        return "fp32"
    flags = set(((platform.get("cpu") or {}).get("vector extensions") or "").split())
    return "bf16" if flags & {"avx512_bf16", "amx_bf16", "amx_tile"} else "fp32"


def precision_rows(params: dict, rows: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The rows whose run trains lm's encoder at ``encoder_precision: auto`` (their figures depend on
    the CPU's bf16 hardware)."""
    from signclust.models.base import get_clusterer
    from signclust.models.train import run_config
    out = []
    for run, corpus in rows:
        method, run_params, _ = run_config(run, params)
        if get_clusterer(method, **run_params).params.get("encoder_precision") == "auto":
            out.append((run, corpus))
    return out


def reference_for(doc: dict, committed_dir: Path,
                  references: dict[str, Path] | None) -> tuple[Path, Path, str]:
    """(folder of the metrics, folder of the timings a reproduced row is judged against, note): the
    committed ones (``committed_dir``, its sibling timings/), unless the committed fit's encoder
    precision differs from this run's and the reference folder of this run's precision holds the
    row (its metrics/ and timings/) and was written with this run's ``fit_stamp``: a reference made
    from other code, settings or corpus is not read (the note says so)."""
    name = f"{doc['method']}_{doc['corpus']}.json"
    timings = committed_dir.parent / "timings"
    here = encoder_precision(doc["ci"].get("platform"))
    committed = encoder_precision(committed_platform(timings / name))
    folder = (references or {}).get(here)
    if committed is None or here == committed or folder is None or not (folder / "metrics" / name).exists():
        return committed_dir, timings, ""
    if timings_record(folder / "timings" / name).get("stamp") != doc["ci"].get("stamp"):
        return committed_dir, timings, (f"; {here} reference {folder.name}/ not read: written from other code, "
                                        f"settings or corpus than this run's (--write-reference on a {here} "
                                        f"CPU renews it)")
    return folder / "metrics", folder / "timings", f"; {here} reference {folder.name}/ (the committed fit: {committed})"


def cross_cpu_verdict(key: str, value, ref, tolerance: float, cross: dict) -> tuple[bool, float, str]:
    """(holds, tolerance applied, note) of a figure that missed the same-CPU ``tolerance`` and whose
    committed figure was made on another CPU: within ``cross[key]`` (for K found: that share of the
    committed K)."""
    if key not in cross:
        return False, tolerance, f"; committed on another CPU, and reproduce.cross_cpu has no {key}"
    limit = float(cross[key]) * abs(ref) if key == "k_found" else float(cross[key])
    return abs(value - ref) <= limit, limit, "; committed on another CPU: held to reproduce.cross_cpu"


def table_verdicts(docs: list[dict], committed_dir: Path, cross: dict | None = None,
                   references: dict[str, Path] | None = None) -> list[dict]:
    """Same-setting rows: one verdict per reproduced seed and figure (``doc["ci"]["figures"]``),
    against the committed figure of that seed. Reduced rows: one per figure, their mean against the
    committed mean. A missing committed file, seed or figure fails. A row whose committed fits ran
    on another CPU (committed_dir/../timings/<run>_<corpus>.json) is held to ``cross``
    (reproduce.cross_cpu) where the same-CPU tolerance fails. A row whose committed fit trained lm's
    encoder in another precision is judged against ``references[this precision]`` where that holds it
    (``reference_for``); a figure that misses the reference still holds if it holds against the
    committed fit (both are fits this CPU may legitimately land near), and its note says so."""
    out = []
    for doc in docs:
        metrics_dir, timings_dir, via = reference_for(doc, committed_dir, references)
        verdicts = _row_verdicts(doc, metrics_dir, timings_dir, via, cross)
        if metrics_dir != committed_dir and not all(v["ok"] for v in verdicts):  # the committed fit where one missed
            plain = _row_verdicts(doc, committed_dir, committed_dir.parent / "timings", "", cross)
            verdicts = [v if v["ok"] or not p["ok"] else
                        {**p, "note": p["note"] + f"; missed the reference ({_num(v['committed'], '{:.4f}')}){via}"}
                        for v, p in zip(verdicts, plain)]
        out += verdicts
    return out


def _row_verdicts(doc: dict, metrics_dir: Path, timings_dir: Path, via: str, cross: dict | None) -> list[dict]:
    """One row's verdicts against the metrics and platform record in the given folders."""
    run, corpus, ci = doc["method"], doc["corpus"], doc["ci"]
    keys = list(ci.get("figures") or ["v_measure"])
    path = metrics_dir / f"{run}_{corpus}.json"
    committed = json.loads(path.read_text()) if path.exists() else None
    same_cpu = committed_platform(timings_dir / path.name) == ci.get("platform")
    if ci["reduced"]:
        pairs = [(None, key, doc["mean"].get(key), f"reduced ({_overrides(ci['overrides'])}) vs committed mean{via}")
                 for key in keys]
    else:
        pairs = [(int(s[4:]), key, v.get(key), f"seed {s[4:]} vs committed seed {s[4:]}{via}")
                 for s, v in doc["per_seed"].items() for key in keys]
    out = []
    for seed, key, value, note in pairs:
        base = {"part": "table", "what": f"{run} on {corpus}: {key}", "tolerance": ci["tolerance"]}
        if committed is None:
            out.append({**base, "committed": None, "ci": value, "ok": False, "note": f"no committed {path.name}"})
            continue
        ref = committed_figure(committed, seed, key)
        ok = ref is not None and value is not None and abs(value - ref) <= ci["tolerance"]
        if ref is None:
            note += f": the committed {path.name} has no such figure"
        elif value is not None and not ok and not same_cpu:
            ok, base["tolerance"], more = cross_cpu_verdict(key, value, ref, ci["tolerance"], cross or {})
            note += more
        out.append({**base, "committed": ref, "ci": value, "ok": bool(ok), "note": note})
    return out


def _overrides(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items()) or "as committed"


def claim_verdicts(docs: list[dict], cfg: dict) -> list[dict]:
    """The README's statements, checked on the CI figures."""
    by = {(d["method"], d["corpus"]): d for d in docs}
    out = []
    for c in cfg.get("claims") or []:
        corpus = c["corpus"]
        if "k_within" in c:
            doc = by.get((c["run"], corpus))
            k = None if doc is None else doc["mean"]["k_found"]
            k_true = None if doc is None else doc["k_true"]
            ok = doc is not None and abs(k - k_true) <= float(c["k_within"]) * k_true
            out.append({"part": "claim", "what": c.get("what") or f"{c['run']} finds K within "
                        f"±{c['k_within']:.0%} of the true number on {corpus}",
                        "committed": k_true, "ci": k, "tolerance": float(c["k_within"]), "ok": bool(ok),
                        "note": f"K found {k} vs true {k_true}" if doc is not None else
                                f"K within ±{c['k_within']:.0%}: the row was not reproduced"})
            continue
        if "v_min" in c:
            doc = by.get((c["run"], corpus))
            v = None if doc is None else doc["mean"]["v_measure"]
            out.append({"part": "claim", "what": c.get("what") or f"{c['run']} reaches V >= {c['v_min']} on {corpus}",
                        "committed": None, "ci": v, "tolerance": float(c["v_min"]),
                        "ok": bool(v is not None and v >= float(c["v_min"])),
                        "note": f"V({c['run']}) >= {c['v_min']}" + ("" if v is not None else
                                                                   ": the row was not reproduced")})
            continue
        a, b = by.get((c["a"], corpus)), by.get((c["b"], corpus))
        margin = float(c.get("margin", 0.0))
        diff = None if a is None or b is None else a["mean"]["v_measure"] - b["mean"]["v_measure"]
        out.append({"part": "claim", "what": c.get("what") or f"{c['a']} beats {c['b']} on {corpus}",
                    "committed": None, "ci": diff, "tolerance": margin,
                    "ok": bool(diff is not None and diff >= margin),
                    "note": f"V({c['a']}) - V({c['b']}) >= {margin}" + ("" if diff is not None else
                                                                        ": a row was not reproduced")})
    return out


def paper_verdicts(rows: list[dict], committed_path: Path, cfg: dict, platform: dict | None = None) -> list[dict]:
    """Each CI paper-check row against the committed row (made on another CPU than ``platform``:
    held to ``reproduce.cross_cpu.paper`` where its own tolerance fails); then the paper figures CI
    must match."""
    committed = {}
    if committed_path.exists():
        committed = {(r["method"], r["dataset"], r["metric"]): r
                     for r in json.loads(committed_path.read_text())["rows"]}
    same_cpu = committed_platform(committed_path) == platform
    out = []
    for r in rows:
        ref = committed.get((r["method"], r["dataset"], r["metric"]))
        ok = ref is not None and abs(r["ours"] - ref["ours"]) <= r["ci_tolerance"]
        tolerance = r["ci_tolerance"]
        note = (f"reduced in CI: n {r['n']} vs {ref['n']}, {r['setting']}" if ref and r["ci_reduced"]
                else "same setting" if ref else "no committed row")
        if ref is not None and not ok and not same_cpu:
            ok, tolerance, more = cross_cpu_verdict("paper", r["ours"], ref["ours"], tolerance,
                                                   cfg.get("cross_cpu") or {})
            note += more
        out.append({"part": "paper", "what": f"{r['method']} on {r['dataset']}: {r['metric']}",
                    "committed": None if ref is None else ref["ours"], "ci": r["ours"],
                    "tolerance": tolerance, "ok": bool(ok), "note": note})
    by = {(r["method"], r["metric"]): r for r in rows}
    for c in cfg.get("paper_claims") or []:
        r = by.get((c["method"], c["metric"]))
        ok = r is not None and r["paper"] is not None and abs(r["ours"] - r["paper"]) <= float(c["within"])
        out.append({"part": "claim", "what": c.get("what") or f"{c['method']} {c['metric']} matches its paper",
                    "committed": None if r is None else r["paper"], "ci": None if r is None else r["ours"],
                    "tolerance": float(c["within"]), "ok": bool(ok), "note": r["source"] if r else "not run"})
    return out


def _num(x, spec="{:.3f}") -> str:
    return "–" if x is None else spec.format(x) if isinstance(x, float) else str(x)


def render(verdicts: list[dict], seconds: dict) -> str:
    failed = sum(not v["ok"] for v in verdicts)
    lines = ["# CI reproduction of the committed tables", "",
             "Generated by `python -m signclust.reports.reproduce` (run by the test suite, so by `.ci/run`). "
             "*committed*: the full-size figure in reports/ (same seed where the setting is the same, else "
             "the mean over seeds); *CI*: this run. For a claim, *CI* is the measured difference or K and "
             "*tolerance* the margin it must reach.", "",
             f"**{len(verdicts) - failed} of {len(verdicts)} hold.** Time: "
             + ", ".join(f"{k} {v:.0f}s" for k, v in seconds.items()) + ".", "",
             "| part | what | committed | CI | Δ | tolerance | holds | note |",
             "|---|---|---:|---:|---:|---:|---|---|"]
    for v in verdicts:
        delta = (v["ci"] - v["committed"]) if v["part"] != "claim" and None not in (v["ci"], v["committed"]) \
            else None
        lines.append(f"| {v['part']} | {v['what']} | {_num(v['committed'], '{:.4f}')} | {_num(v['ci'], '{:.4f}')} | "
                     f"{_num(delta, '{:+.4f}')} | {_num(v['tolerance'])} | {'yes' if v['ok'] else '**no**'} | "
                     f"{v['note']} |")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def torch_threads(n: int | None):
    """torch's intra-op threads pinned to ``n`` for the block. The deep baselines' figures depend on
    it (another summation order, another training run): 0.794 vs 0.756 NMI for DeepCluster on MNIST
    with 2 threads vs 1. Model modules are imported first: one sets numba's OpenMP thread count on
    import, which is torch's too."""
    import torch

    from signclust.models.base import _import_all
    _import_all()
    before = torch.get_num_threads()
    torch.set_num_threads(int(n or before))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def missing_paper_data(params: dict) -> list[str]:
    """One line per data set the paper part needs and this machine lacks, saying how to get it."""
    from signclust.data import benchmarks
    missing = []
    for name in sorted({c["dataset"] for c in (params.get("paper_check") or {}).get("checks") or []}):
        family, _, split = name.partition("_")
        if family not in ("mnist", "fashion"):
            continue
        folder = benchmarks.MNIST_DIR if family == "mnist" else benchmarks.FASHION_DIR
        for part in (["t10k"] if split == "test" else ["train", "t10k"]):
            for kind in ("images-idx3", "labels-idx1"):
                try:
                    benchmarks._find(folder, f"{part}-{kind}-ubyte")
                except UserError as err:
                    missing.append(f"{name}: {err}")
    return missing


def reproduce(params: dict, out: Path, parts=PARTS, progress: bool = False, committed: Path | None = None) -> dict:
    """Run the parts, write everything under ``out``; the verdicts document. ``committed``: the
    folder holding the committed metrics/ and paper_check.json (default reports/)."""
    cfg = params.get("reproduce") or {}
    with torch_threads(cfg.get("threads")):
        return _reproduce(params, cfg, out, parts, progress, Path(committed or REPO_ROOT / "reports"))


def _reproduce(params: dict, cfg: dict, out: Path, parts, progress: bool, reports: Path) -> dict:
    from signclust.reports import paper_check, table
    verdicts, seconds = [], {}
    if "table" in parts:
        t0 = time.time()
        docs = reproduce_table(params, cfg, out, progress)
        text = table.render_markdown(docs, (params.get("report") or {}).get("methods"),
                                     source="python -m signclust.reports.reproduce (CI-sized)")
        atomic_write_text(out / "comparison.md", text)
        references = {k: reports / v for k, v in (cfg.get("references") or {}).items()}
        verdicts += (table_verdicts(docs, reports / "metrics", cfg.get("cross_cpu"), references)
                     + claim_verdicts(docs, cfg))
        seconds["table"] = time.time() - t0
    if "paper" in parts:
        t0 = time.time()
        rows = paper_check.run_all(params, "ci", out / "paper_check.md", progress=progress)
        verdicts += paper_verdicts(rows, reports / "paper_check.json", cfg, run_platform())
        seconds["paper"] = time.time() - t0
    doc = {"verdicts": verdicts, "seconds": seconds, "failed": sum(not v["ok"] for v in verdicts)}
    write_json(out / "reproduction.json", doc)
    atomic_write_text(out / "reproduction.md", render(verdicts, seconds))
    return doc


def write_reference(params: dict, reports: Path, progress: bool = False) -> Path:
    """Fit the rows of ``precision_rows`` as ``reproduce`` does and keep them as this machine's
    precision's reference (``reproduce.references.<precision>`` under ``reports``): metrics/ and
    timings/ (the platform record), one file per row, as the committed folders hold them."""
    cfg = params.get("reproduce") or {}
    with torch_threads(cfg.get("threads")):
        here = encoder_precision(run_platform())
        name = (cfg.get("references") or {}).get(here)
        if name is None:
            raise UserError(f"this CPU trains lm's encoder in {here}, and reproduce.references has no "
                            f"folder for {here}")
        folder = reports / name
        rows = precision_rows(params, table_rows(cfg))
        with tempfile.TemporaryDirectory(prefix="signclust-ref-") as scratch:
            docs = reproduce_table(params, cfg, Path(scratch), progress, only=rows)
        for doc in docs:
            ci = doc.pop("ci")
            file = f"{doc['method']}_{doc['corpus']}.json"
            write_json(folder / "metrics" / file, doc)
            write_json(folder / "timings" / file, {
                "note": f"the committed settings' fit with lm's encoder in {here}: the reference of "
                        "signclust.reports.reproduce for a CPU of this precision",
                "seconds": ci["seconds"], "platform": ci["platform"], "stamp": ci["stamp"]})
    return folder


@cli_main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=PARTS, help="one part (default both)")
    ap.add_argument("--out", type=Path, help="default reports/ci")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--write-reference", action="store_true",
                    help="fit the rows whose lm encoder trains at encoder_precision auto and write them to "
                         "reports/<reproduce.references.<this CPU's precision>>; nothing else runs")
    args = ap.parse_args(argv)
    if args.write_reference:
        folder = write_reference(load_params(), REPO_ROOT / "reports", progress=not args.no_progress)
        print(f"reference rows -> {folder}")
        return 0
    out = args.out or REPO_ROOT / "reports" / "ci"
    params = load_params()
    parts = (args.only,) if args.only else PARTS
    missing = missing_paper_data(params) if "paper" in parts else []
    if missing:
        raise UserError("the paper part needs data this machine lacks (--only table runs without it): "
                        + "; ".join(missing))
    doc = reproduce(params, out, parts, progress=not args.no_progress)
    for v in doc["verdicts"]:
        print(f"{'ok  ' if v['ok'] else 'FAIL'} {v['what']}: CI {_num(v['ci'])} vs {_num(v['committed'])} "
              f"(tolerance {_num(v['tolerance'])})")
    print(f"{len(doc['verdicts']) - doc['failed']}/{len(doc['verdicts'])} hold -> {out / 'reproduction.md'}")
    return 1 if doc["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
