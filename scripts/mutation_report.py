"""The mutation table from mutmut's results in mutants/ (see scripts/mutation.sh).

    python scripts/mutation_report.py            # per module: generated / killed / survived / timeout
    python scripts/mutation_report.py --survivors   # and every surviving mutant's name

Counts only the functions scripts/mutation.sh names (its globs are repeated here).
"""
from __future__ import annotations

import fnmatch
import json
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATUS = {1: "killed", 3: "killed", 0: "survived", 36: "timeout", -24: "timeout", 24: "timeout", 152: "timeout",
          255: "timeout", 5: "no tests", 33: "no tests", None: "not checked"}


def targets() -> dict[str, list[str]]:
    """module -> globs, read from scripts/mutation.sh so the two never disagree."""
    text = (ROOT / "scripts" / "mutation.sh").read_text()
    block = text.split("declare -A TARGETS=(", 1)[1].split("\n)", 1)[0]
    return {m: g.split() for m, g in re.findall(r"\[(\w+)\]=\"([^\"]*)\"", block)}


def results() -> dict[str, int | None]:
    out = {}
    for meta in (ROOT / "mutants").rglob("*.meta"):
        out.update(json.loads(meta.read_text())["exit_code_by_key"])
    return out


def main(argv: list[str]) -> int:
    codes = results()
    if not codes:
        print("no results under mutants/: run scripts/mutation.sh first", file=sys.stderr)
        return 1
    rows, survivors = [], []
    for module, globs in targets().items():
        names = sorted(n for n in codes if any(fnmatch.fnmatchcase(n, g) for g in globs))
        count = Counter(STATUS.get(codes[n], "other") for n in names)
        rows.append((module, len(names), count))
        survivors += [n for n in names if STATUS.get(codes[n]) == "survived"]
    print("| module | mutants | killed | survived | timeout | no tests | not checked | other |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for module, n, c in rows:
        print(f"| {module} | {n} | {c['killed']} | {c['survived']} | {c['timeout']} | {c['no tests']} | "
              f"{c['not checked']} | {c['other']} |")
    if "--survivors" in argv:
        print()
        for name in survivors:
            print(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
