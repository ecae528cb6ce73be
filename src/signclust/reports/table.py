"""Stage `report`: the comparison table of all evaluated methods, one table per corpus.

    python -m signclust.reports.table
    python -m signclust.reports.table --corpora cypriot --out reports/comparison_cypriot.md \
        --figure reports/figures/comparison_cypriot.png     # the main job's table (stage report_main)

Reads reports/metrics/<method>_<corpus>.json (written by the evaluate stage) for the corpora of
params.yaml ``report.corpora`` and the wall times of reports/timings/ (written by the train stage:
run-to-run noise that only this last table reads) and writes
reports/comparison.md plus a bar chart reports/figures/comparison.png
(V-measure native and fixed-K per method, error bars = std over seeds). The table ends with the
machines the fits ran on (the timings' platform records): a torch row's figures depend on the CPU,
and `lm`'s on whether it has bf16 hardware, so a reader whose `dvc repro` gives other figures than
a committed table sees why.
Methods appear in the order of params.yaml ``report.methods`` (others after it, alphabetically).
"""
from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

import numpy as np

from signclust.config import REPO_ROOT, load_params
from signclust.errors import UserError, cli_main
from signclust.io import atomic_path
from signclust.json_files import read_json

# (metric key, column header, format of mean/std); ratios get 3 decimals, counts and seconds fewer
COLUMNS = [
    ("v_measure", "V-measure", "{:.3f}"),
    ("nmi", "NMI", "{:.3f}"),
    ("ari", "ARI", "{:.3f}"),
    ("acc", "ACC", "{:.3f}"),
    ("purity", "purity", "{:.3f}"),
    ("k_found", "K found", "{:.1f}"),
    ("fixed_k_v_measure", "fixed-K mean V", "{:.3f}"),
    ("seconds", "wall time (s)", "{:.1f}"),   # from reports/timings/, fresh fits only
]
MISSING = "–"


def load_metrics(metrics_dir: Path, corpora: list | None = None, timings_dir: Path | None = None) -> list[dict]:
    """The evaluate stage's documents (of ``corpora`` when given), each with the mean/std wall time
    of its fresh fits from ``timings_dir`` (a fit resumed from a checkpoint is left out of it)."""
    if not Path(metrics_dir).is_dir():
        raise UserError(f"no metrics folder {metrics_dir}; run the evaluate stage first (dvc repro)")
    docs, others = [], set()
    for path in sorted(Path(metrics_dir).glob("*.json")):
        if path.name.startswith("ablation_"):   # the ablation stage's metrics share the folder
            continue
        doc = read_json(path, "the evaluate stage's metrics")
        if "mean" not in doc or "corpus" not in doc:
            raise UserError(f"{path} is not an evaluate metrics file (no 'mean'/'corpus')")
        if corpora is not None and doc["corpus"] not in corpora:
            others.add(doc["corpus"])
            continue
        if timings_dir is not None:
            add_wall_time(doc, Path(timings_dir) / f"{doc['method']}_{doc['corpus']}.json")
        docs.append(doc)
    if not docs and others:
        raise UserError(f"no metrics of {', '.join(corpora)} in {metrics_dir} (it has {', '.join(sorted(others))}); "
                        "check the corpus names or run their evaluate stages first")
    if not docs:
        raise UserError(f"no metrics files in {metrics_dir}; run the evaluate stage first")
    return docs


def fresh_seconds(timings: dict) -> list[float]:
    """The wall times of a reports/timings/ file's fresh fits (a fit resumed from a checkpoint says so
    there and is left out: its time is not a fit's)."""
    return [float(t["seconds"]) for t in (timings.get("per_seed") or {}).values() if not t.get("resumed")]


def add_wall_time(doc: dict, path: Path) -> None:
    """The mean/std wall time of a timings file's fresh fits, and the machine they ran on, into ``doc``."""
    if not path.is_file():
        return
    timings = read_json(path, "the train stage's timings")
    doc["machine"] = machine_name(timings.get("platform"))
    fresh = fresh_seconds(timings)
    if fresh:
        doc["mean"]["seconds"] = float(np.mean(fresh))
        doc["std"]["seconds"] = float(np.std(fresh, ddof=1)) if len(fresh) > 1 else 0.0


def machine_name(platform: dict | None) -> str:
    """The CPU of a timings file's ``platform`` record, as far as a fit's figures depend on it: its
    name, family and model, the vector width torch dispatches to, and whether it has the bf16
    hardware on which `lm` trains its encoder in bf16 (float32 elsewhere)."""
    from signclust.reports.reproduce import encoder_precision   # a report beside this one; nothing upstream
    if not platform:
        return "not recorded"
    cpu = platform.get("cpu") or {}
    ident = ", ".join(f"{key} {cpu[key]}" for key in ("cpu family", "model") if cpu.get(key))
    bf16 = "bf16 hardware" if encoder_precision(platform) == "bf16" else "no bf16 hardware"
    details = "; ".join(x for x in (ident, f"torch {platform.get('torch_cpu_capability', '?')}", bf16) if x)
    return f"{cpu.get('model name') or 'unknown CPU'} ({details})"


def machines_section(docs: list[dict], order: list[str], groups: dict[str, list[str]] | None = None) -> str:
    """Markdown: each machine with the rows fitted on it (a method whose corpora were fitted on
    several machines is named with its corpora there, a whole group of ``groups``, {name: corpora},
    by the group's name); empty when no document carries a machine."""
    docs = [d for d in docs if "machine" in d]
    if not docs:
        return ""
    rank = {m: i for i, m in enumerate(order)}            # order holds every method of the documents
    docs = sorted(docs, key=lambda d: (rank[d["method"]], d["corpus"]))
    spread = {m: len({d["machine"] for d in docs if d["method"] == m}) for m in rank}
    fitted: dict[str, dict[str, list[str]]] = {}          # machine -> method -> corpora
    for d in docs:
        fitted.setdefault(d["machine"], {}).setdefault(d["method"], []).append(d["corpus"])

    def corpora_named(corpora: list[str]) -> str:
        names, left = [], list(corpora)
        for name, members in (groups or {}).items():
            if members and set(members) <= set(left):
                names.append(name)
                left = [c for c in left if c not in members]
        return ", ".join(names + left)
    lines = ["## Machines", "",
             "Where each row's fits ran (`reports/timings/`). A row with a torch network gives other figures on "
             "another CPU, and `lm` trains its glyph encoder in bf16 on a CPU with bf16 hardware (AVX512-BF16 or "
             "AMX) and in float32 elsewhere, which moves its K (README, *Paper tables in CI*).", ""]
    for machine, methods in fitted.items():
        names = [m if spread[m] == 1 else f"{m} ({corpora_named(corpora)})" for m, corpora in methods.items()]
        lines.append(f"- {machine}: {', '.join(names)}")
    return "\n".join(lines) + "\n"


def method_order(methods, preferred: list | None) -> list[str]:
    """The preferred order first, then the rest alphabetically."""
    preferred = [m for m in (preferred or []) if m in set(methods)]
    return preferred + sorted(set(methods) - set(preferred))


def cell(doc: dict, key: str, fmt: str) -> str:
    if key not in doc["mean"]:
        return MISSING
    return f"{fmt.format(doc['mean'][key])} ± {fmt.format(doc['std'].get(key, 0.0))}"


def corpus_table(corpus: str, docs: list[dict], order: list[str]) -> str:
    """Markdown for one corpus; the best mean V-measure (native and fixed-K) in bold."""
    by_method = {d["method"]: d for d in docs}
    k_true = sorted({d["k_true"] for d in docs})
    n_tok = sorted({d.get("n_tokens") for d in docs})
    header = ["method", "seeds"] + [h for _, h, _ in COLUMNS]
    lines = [f"## {corpus}", "",
             f"K true = {', '.join(map(str, k_true))}; {', '.join(map(str, n_tok))} tokens. "
             "Each cell: mean ± std over seeds.", "",
             "| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    best = {key: max(d["mean"].get(key, -np.inf) for d in docs) for key in ("v_measure", "fixed_k_v_measure")}
    for method in [m for m in order if m in by_method]:
        doc = by_method[method]
        cells = []
        for key, _, fmt in COLUMNS:
            text = cell(doc, key, fmt)
            if key in best and doc["mean"].get(key) == best[key] and len(docs) > 1:
                text = f"**{text}**"
            cells.append(text)
        lines.append(f"| {method} | {doc['n_seeds']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_markdown(docs: list[dict], preferred: list | None = None,
                    source: str = "python -m signclust.reports.table") -> str:
    corpora = sorted({d["corpus"] for d in docs})
    order = method_order({d["method"] for d in docs}, preferred)
    parts = ["# Method comparison", "",
             "Native: each method's own assignment. Fixed-K: Ward on the method's token "
             "representation at K true + {−15, …, +15}, mean V-measure (Born et al. 2023). "
             f"Generated by `{source}`; do not edit.", ""]
    for corpus in corpora:
        parts.append(corpus_table(corpus, [d for d in docs if d["corpus"] == corpus], order))
    machines = machines_section(docs, order)
    return "\n".join(parts + ([machines] if machines else []))


def bar_chart(docs: list[dict], order: list[str], path: Path) -> None:
    """One panel per corpus: native and fixed-K V-measure per method, std as error bars, saved at
    ``path`` (the caller's temporary file: ``build`` renames it with the table)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    corpora = sorted({d["corpus"] for d in docs})
    fig, axes = plt.subplots(1, len(corpora), figsize=(max(4.0, 0.9 * len(order) + 1.5) * len(corpora), 3.4),
                             squeeze=False, sharey=True)
    for ax, corpus in zip(axes[0], corpora):
        by_method = {d["method"]: d for d in docs if d["corpus"] == corpus}
        methods = [m for m in order if m in by_method]
        x = np.arange(len(methods))
        for offset, key, label, color in ((-0.2, "v_measure", "native", "#35608d"),
                                          (0.2, "fixed_k_v_measure", "fixed-K", "#e0803a")):
            means = [by_method[m]["mean"].get(key, np.nan) for m in methods]
            stds = [by_method[m]["std"].get(key, 0.0) for m in methods]
            ax.bar(x + offset, means, 0.4, yerr=stds, capsize=3, label=label, color=color)
        ax.set_xticks(x, methods, rotation=30, ha="right", fontsize=8)
        ax.set_title(corpus, fontsize=10)
        ax.set_ylim(0, 1)
        ax.grid(axis="y", alpha=0.3)
    axes[0, 0].set_ylabel("V-measure (mean ± std over seeds)")
    axes[0, -1].legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)


def build(metrics_dir: Path, out_md: Path, out_png: Path | None, preferred: list | None,
          corpora: list | None = None, timings_dir: Path | None = None,
          source: str = "python -m signclust.reports.table") -> str:
    docs = load_metrics(metrics_dir, corpora, timings_dir)
    text = render_markdown(docs, preferred, source)
    # the table and its figure are written together or not at all: both go to temporary files first,
    # so a figure folder that cannot be written no longer leaves a new table beside an old figure
    with atomic_path(out_md) as tmp_md, \
            (atomic_path(out_png) if out_png is not None else contextlib.nullcontext()) as tmp_png:
        tmp_md.write_text(text)
        if out_png is not None:
            bar_chart(docs, method_order({d["method"] for d in docs}, preferred), tmp_png)
    return text


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--metrics-dir", help="default reports/metrics")
    ap.add_argument("--out", help="default reports/comparison.md")
    ap.add_argument("--figure", help="default reports/figures/comparison.png")
    ap.add_argument("--corpora", nargs="+", metavar="CORPUS",
                    help="the corpora of the table (default params.yaml report.corpora)")
    args = ap.parse_args(argv)
    report = load_params().get("report") or {}
    reports = REPO_ROOT / "reports"
    out = Path(args.out or reports / "comparison.md")
    figure = Path(args.figure or reports / "figures" / "comparison.png")
    source = "python -m signclust.reports.table" + (f" --corpora {' '.join(args.corpora)}" if args.corpora else "")
    build(Path(args.metrics_dir or reports / "metrics"), out, figure, report.get("methods"),
          args.corpora or report.get("corpora"), reports / "timings", source)
    print(f"comparison -> {out}, {figure}")


if __name__ == "__main__":
    main()
