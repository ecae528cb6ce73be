"""The ``signclust`` command: one entry point for every stage.

    signclust [--params FILE] [--root DIR] COMMAND [ARGS...]
    signclust COMMAND --help          # the stage's own options

Each command runs the stage's own ``main()`` (the same as ``python -m <module>``) with the
remaining arguments. The project (where data/, models/, reports/ and mlflow.db live) is the first
folder at or above the working directory that holds params.yaml or dvc.yaml; ``--root DIR`` or
``$SIGNCLUST_ROOT`` names it instead. ``--params FILE`` reads the parameters from FILE instead of
the project's params.yaml (worker subprocesses inherit it).
"""
from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys

# command -> (module with main(), one line for --help). Imported only when run: `signclust --help`
# stays instant (no torch import).
COMMANDS: dict[str, tuple[str, str]] = {
    "import": ("signclust.data.import_corpus", "bring your own corpus: manifest CSV + image folder -> corpus folder"),
    "prepare": ("signclust.data.prepare", "build a built-in corpus (lineara, cypriot, akkadian)"),
    "benchmark-data": ("signclust.data.benchmarks", "MNIST / Fashion-MNIST / digits in the corpus format"),
    "distances": ("signclust.distances.stage", "image distance matrix and kNN graph of a corpus"),
    "train": ("signclust.models.train", "fit a run of params.yaml `runs` on a corpus, for several seeds"),
    "evaluate": ("signclust.evaluation.evaluate", "score every seed of a run: native and fixed-K protocols"),
    "inventory": ("signclust.reports.inventory", "the interactive sign inventory (HTML) and its PNG sheet"),
    "report": ("signclust.reports.table", "the comparison table of every evaluated run"),
    "ablation": ("signclust.evaluation.ablation", "loss-weight ablation of the LM clusterer"),
    "tune": ("signclust.tuning.tune", "Optuna study of a method's parameters (parallel, resumable)"),
    "tune-summary": ("signclust.tuning.summary", "every published study side by side (reports/tune_comparison.md)"),
    "paper-check": ("signclust.reports.paper_check", "baselines against their papers' figures"),
    "reproduce": ("signclust.reports.reproduce", "CI-sized rebuild of the committed tables, judged figure by figure"),
}


def _parser() -> argparse.ArgumentParser:
    width = max(map(len, COMMANDS))
    listing = "\n".join(f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items())
    ap = argparse.ArgumentParser(
        prog="signclust", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n")[0].strip(),
        epilog=f"commands:\n{listing}\n\n`signclust COMMAND --help` shows a command's options.",
        usage="signclust [--params FILE] [--root DIR] COMMAND [ARGS...]")
    ap.add_argument("--params", metavar="FILE", help="parameter file (default: the project's params.yaml)")
    ap.add_argument("--root", metavar="DIR", help="project folder (default: the first folder at or above the "
                                                  "working directory holding params.yaml or dvc.yaml; "
                                                  "or $SIGNCLUST_ROOT)")
    ap.add_argument("--version", action="store_true", help="print the version and exit")
    ap.add_argument("command", nargs="?", metavar="COMMAND")
    ap.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return ap


def unknown_command(name: str) -> str:
    close = difflib.get_close_matches(name, COMMANDS, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"unknown command '{name}'{hint}; commands: {', '.join(COMMANDS)}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = _parser()
    args = ap.parse_args(argv)
    if args.version:
        from signclust import __version__
        print(f"signclust {__version__}")
        return 0
    if args.command in (None, "help") and not args.args:
        ap.print_help()
        return 0 if args.command == "help" else 2
    if args.command == "help":                     # `signclust help train` = `signclust train --help`
        args.command, args.args = args.args[0], ["--help"]
    if args.command not in COMMANDS:
        print(f"error: {unknown_command(args.command)}", file=sys.stderr)
        return 2
    # the environment first: signclust.config reads it when the stage module imports it
    if args.root:
        if not os.path.isdir(args.root):
            print(f"error: --root {args.root}: no such folder", file=sys.stderr)
            return 2
        os.environ["SIGNCLUST_ROOT"] = os.path.abspath(args.root)
    if args.params:
        if not os.path.isfile(args.params):
            print(f"error: --params {args.params}: no such file", file=sys.stderr)
            return 2
        os.environ["SIGNCLUST_PARAMS"] = os.path.abspath(args.params)
        if "signclust.config" in sys.modules:       # imported already (tests, a notebook)
            sys.modules["signclust.config"].set_params_file(args.params)
    module = importlib.import_module(COMMANDS[args.command][0])
    old_argv0 = sys.argv[0]
    sys.argv[0] = f"signclust {args.command}"      # the stage's --help and errors name this command
    try:
        rc = module.main(args.args)
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv[0] = old_argv0
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
