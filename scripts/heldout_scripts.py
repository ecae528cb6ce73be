"""Our clusterer on scripts outside the scored suite (issue 9: "generality beats the last 0.01").

    .venv/bin/python scripts/heldout_scripts.py                 # -> reports/heldout_scripts.md
    .venv/bin/python scripts/heldout_scripts.py --scripts armenian --seeds 0
    .venv/bin/python scripts/heldout_scripts.py --set refits=1 --out reports/heldout_scripts_refits1.md
    .venv/bin/python scripts/heldout_scripts.py --regimes free --out reports/heldout_scripts_free.md
    .venv/bin/python scripts/heldout_scripts.py --tokens 1000 --seeds 0 --out reports/heldout_scripts_1000_tokens.md

The suite builder (data/suite.py) knows more scripts than the default suite scores
(params.yaml ``prepare.suite.scripts``): Armenian (60 signs) and Ethiopic (135 signs, an abugida)
are built the same way, all three regimes, and kept out of the suite, of every study and of every
default. This script builds them in memory, fits the configured rows (``runs.<row>``
of params.yaml, exactly as the train stage configures them: ``lm`` never given K, the Ward
references given K true) and writes one table against the suite's targets: the margin over
``ward_pixels`` and K found against K true. The labels are used only to score. ``--set KEY=VALUE``
changes one of ``lm``'s parameters (checked like every parameter), to see whether an option
found on the suite holds on scripts it was not chosen on; such a study needs its own ``--out``, as does
``--tokens N`` (corpora of N tokens instead of ``prepare.suite.n_tokens``: a default chosen on
3000-token corpora, tried on shorter and longer ones). ``--typefaces F1 F2 ...`` draws every given
script with those font files instead of ``prepare.suite.fonts`` (its own --out): then the suite's own
scripts may be given too, since their corpora are then drawn in typefaces no default saw (a script whose
handwriting uses the Hershey stroke fonts, ``prepare.suite.hershey_scripts``, is refused in that regime:
its corpus would be the suite's).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts"))

from pair_model_calibration import report_path  # noqa: E402  (--out, else reports/<name>; its own --out for another study)
from signclust.config import load_params  # noqa: E402
from signclust.data import suite  # noqa: E402
from signclust.data.corpus import Corpus  # noqa: E402
from signclust.errors import UserError, cli_main  # noqa: E402
from signclust.evaluation.metrics import score  # noqa: E402
from signclust.io import atomic_write_text  # noqa: E402
from signclust.models.base import FitContext, get_clusterer  # noqa: E402
from signclust.models.train import run_config  # noqa: E402

ROWS = ("lm", "ward_pixels", "ward_glyphs")
HELDOUT = ["armenian", "ethiopic"]          # scripts the builder knows and no default was chosen on


def check_typefaces(typefaces: list[str] | None) -> None:
    """``--typefaces``, when given, names at least two different font files."""
    if typefaces is not None and len(set(typefaces)) < 2:
        raise UserError("--typefaces: give at least two different font files")


def fit_row(row: str, corpus: Corpus, seed: int, params: dict,
            changes: dict | None = None) -> tuple[float, int, float]:
    """(V, K found, seconds) of one configured row at one seed, with ``changes`` to its parameters."""
    method, cfg, _ = run_config(row, params)
    clusterer = get_clusterer(method, **{**cfg, **(changes or {})})
    k_true = corpus.counts()["types"]
    t0 = time.time()
    result = clusterer.fit(corpus, FitContext(seed=seed, n_clusters=k_true if clusterer.needs_k else None,
                                              progress=False))
    return float(score(corpus.labels(), result.labels)["v_measure"]), int(result.k_found), time.time() - t0


def encoder_dtype(changes: dict | None = None) -> str:
    """What ``encoder_precision`` resolves to on this machine for ``runs.lm`` with ``changes`` (bf16 only where
    the CPU has it in hardware under ``auto``): fits made at another precision are other fits."""
    import torch

    from signclust.models.visual_encoder import compute_dtype
    method, cfg, _ = run_config(ROWS[0], load_params())
    precision = get_clusterer(method, **{**cfg, **(changes or {})}).cfg.encoder_precision
    return str(compute_dtype(precision, torch.device("cpu"))).removeprefix("torch.")


def parse_changes(items: list[str]) -> dict:
    """``KEY=VALUE`` strings -> {KEY: VALUE}, each VALUE read as YAML (1 -> int, 0.5 -> float)."""
    import yaml
    changes = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UserError(f"--set {item!r}: expected KEY=VALUE, e.g. --set refits=1")
        try:
            changes[key] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise UserError(f"--set {item!r}: the value is not YAML ({str(exc).splitlines()[0]})") from None
    return changes


def markdown(table: dict, seeds: list[int], scripts: list[str], targets: dict, changes: dict | None = None,
             regimes: tuple = suite.REGIMES, tokens: int | None = None, suite_tokens: int = 3000,
             typefaces: list[str] | None = None, dtype: str | None = None) -> str:
    ours, ref = ROWS[0], targets["margin_over"]
    lines = ["# Held-out scripts: the suite's targets on scripts no default was chosen on", "",
             f"Written by `scripts/heldout_scripts.py` (seeds {', '.join(map(str, seeds))}; mean ± std). "
             f"Scripts {', '.join(scripts)}, built by the suite's builder (`data/suite.py`) in "
             + ("all three regimes" if set(regimes) == set(suite.REGIMES) else
                f"the regime{'s' if len(regimes) > 1 else ''} {', '.join(regimes)}")
             + (f", {tokens} tokens each (`--tokens`; the suite's corpora have {suite_tokens})" if tokens else "")
             + (f", drawn with the typefaces {', '.join(f'`{f}`' for f in typefaces)} (`--typefaces`) that no "
                "corpus of the scored suite uses (so even a suite script's corpora are new)" if typefaces else "")
             + " and kept out of the scored suite, of the tuning studies and of every default. "
             f"`{ours}` is never given K; the Ward references are given K true."
             + (f" `{ours}` changed by {', '.join(f'`{k}: {v}`' for k, v in changes.items())}." if changes else "")
             + (f" `{ours}`'s encoder trained in {dtype} here (`encoder_precision` as configured: bf16 only on a CPU "
                "with it in hardware); fit times are this machine's." if dtype else ""),
             "",
             f"| corpus | K true | `{ours}` V | K found (error) | " + " | ".join(f"`{r}` V" for r in ROWS[1:])
             + f" | margin over `{ref}` | s / fit (`{ours}`) |",
             "|---|---:|---:|---:|" + "---:|" * (len(ROWS) - 1) + "---:|---:|"]
    margins, kerr = [], []
    for name, row in table.items():
        v = {r: np.array([x[0] for x in row[r]]) for r in ROWS}
        k = float(np.mean([x[1] for x in row[ours]]))
        err = (k - row["k_true"]) / row["k_true"]
        margin = float(v[ours].mean() - v[ref].mean())
        margins.append((name, margin))
        kerr.append((name, err))
        lines.append(f"| {name} | {row['k_true']} | **{v[ours].mean():.3f} ± {v[ours].std():.3f}** | {k:.0f} ({err:+.0%}) | "
                     + " | ".join(f"{v[r].mean():.3f}" for r in ROWS[1:])
                     + f" | {margin:+.3f} | {np.mean([x[2] for x in row[ours]]):.1f} |")
    lines += ["", "## Targets (as in reports/suite.md)", "",
              "| target | measured | misses |", "|---|---|---|"] + target_rows(margins, kerr, targets)
    # each fit apart: a study of one seed is compared with the same seed of another study, not with a mean
    lines += ["", f"## Each fit of `{ours}`", "", "| corpus | seed | V | K found | s |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {name} | {s} | {v:.3f} | {k} | {sec:.0f} |"
              for name, row in table.items() for s, (v, k, sec) in zip(seeds, row[ours])]
    return "\n".join(lines) + "\n"


def target_rows(margins: list[tuple[str, float]], kerr: list[tuple[str, float]], targets: dict) -> list[str]:
    """The margin and K rows of a targets table from (corpus, margin over the reference) and (corpus,
    relative K error) pairs."""
    short = [f"{n} ({m:+.3f})" for n, m in margins if m < targets["margin"]]
    far = [f"{n} ({e:+.0%})" for n, e in kerr if abs(e) > targets["k_within"]]
    return [f"| native V ≥ `{targets['margin_over']}` + {targets['margin']} | {len(margins) - len(short)}/"
            f"{len(margins)} corpora; smallest margin {min(m for _, m in margins):+.3f} | {', '.join(short) or '–'} |",
            f"| K found within ±{targets['k_within']:.0%} of K true | {len(kerr) - len(far)}/{len(kerr)} corpora; "
            f"median absolute error {np.median([abs(e) for _, e in kerr]):.0%} | {', '.join(far) or '–'} |"]


@cli_main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scripts", nargs="+", default=HELDOUT)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--regimes", nargs="+", default=list(suite.REGIMES), choices=suite.REGIMES)
    ap.add_argument("--out", help="default reports/heldout_scripts.md")
    ap.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help=f"change {ROWS[0]}'s parameters")
    ap.add_argument("--tokens", type=int, help="tokens per corpus (default prepare.suite.n_tokens)")
    ap.add_argument("--typefaces", nargs="+", metavar="FONT",
                    help="font files to draw every script with instead of prepare.suite.fonts (at least two)")
    args = ap.parse_args(argv)
    params = load_params()
    changes = parse_changes(args.set)
    out = report_path(args.out, "heldout_scripts.md", ("--set", "--regimes", "--tokens", "--typefaces"),
                      bool(changes) or set(args.regimes) != set(suite.REGIMES) or args.tokens is not None
                      or bool(args.typefaces))
    suite_tokens = params["prepare"]["suite"]["n_tokens"]
    if args.tokens is not None:
        params["prepare"]["suite"]["n_tokens"] = args.tokens        # load_texts checks it (positive, available)
    method, cfg, _ = run_config(ROWS[0], params)
    get_clusterer(method, **{**cfg, **changes})                    # an unknown or bad value: one line, now
    scored = set(params["prepare"]["suite"]["scripts"])
    overlap = sorted(set(args.scripts) & scored)
    if overlap and not args.typefaces:
        raise UserError(f"{', '.join(overlap)}: part of the scored suite (prepare.suite.scripts), not held out")
    check_typefaces(args.typefaces)
    if args.typefaces:
        stroked = sorted(s for s in args.scripts if s in params["prepare"]["suite"].get("hershey_scripts", []))
        if stroked and "handwriting" in args.regimes:
            raise UserError(f"{', '.join(stroked)}: its handwriting is drawn with the Hershey stroke fonts, not "
                            "typefaces; leave the handwriting regime out (--regimes free hands)")
        for script in args.scripts:
            params["prepare"]["suite"]["fonts"][script] = list(args.typefaces)
    targets = params["report"]["suite"]["targets"]
    # every corpus built before any fit: a script too short for --tokens fails now, not after the others' fits
    corpora = {f"{script}_{reg}": suite.build(f"{script}_{reg}", params["prepare"])
               for script in args.scripts for reg in args.regimes}
    table: dict = {}
    for name, corpus in corpora.items():
        table[name] = {"k_true": corpus.counts()["types"]}
        for row in ROWS:
            table[name][row] = []
            for s in args.seeds:      # one line a fit: a float32 or emulated-bf16 lm fit takes minutes
                v, k, seconds = fit_row(row, corpus, s, params, changes if row == ROWS[0] else None)
                table[name][row].append((v, k, seconds))
                print(f"{name} {row} seed {s}: V {v:.3f}, K {k} of {table[name]['k_true']}, {seconds:.0f} s",
                      flush=True)
        print(f"{name}: " + ", ".join(f"{r} V {np.mean([x[0] for x in table[name][r]]):.3f}" for r in ROWS),
              flush=True)
    text = markdown(table, args.seeds, args.scripts, targets, changes, args.regimes, args.tokens, suite_tokens,
                    args.typefaces, encoder_dtype(changes))
    atomic_write_text(out, text)
    print(text)


if __name__ == "__main__":
    main()
