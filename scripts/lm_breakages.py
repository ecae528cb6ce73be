"""Apply each known breakage of the gradient LM to a scratch copy of src/ and run its tests there.

    python scripts/lm_breakages.py [pytest args...]        # default: tests/test_lm_gradient.py

Each breakage is one exact text replacement in src/signclust/models/lm_gradient.py (it must match
exactly once). The source tree of this checkout is never modified: every breakage runs on its own
copy under a temporary folder, with PYTHONPATH pointing there. Prints, per breakage, the tests that
failed; exits 1 if a breakage survives (no test failed) or the unbroken code fails a test.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = Path("signclust/models/lm_gradient.py")

BREAKAGES = {
    "causal shift removed (the LSTM sees the current token)": (
        "        x = torch.cat([self.bos.expand(len(x), 1, -1), x[:, :-1]], dim=1)\n", ""),
    "end-of-text target off by one (_with_eos)": (
        "    lengths = mask.sum(1)\n", "    lengths = mask.sum(1) - 1\n"),
    "kernel similarity not squared": (
        "torch.exp(-(d / scale) ** 2)", "torch.exp(-(d / scale))"),
    "median distance scale dropped": (
        'similarity(d_ex, p["dup_similarity"], max(scale, 1e-6))', 'similarity(d_ex, p["dup_similarity"], 1.0)'),
}


def run_tests(src: Path, args: list[str]) -> tuple[int, list[str], str]:
    env = dict(os.environ, PYTHONPATH=str(src))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    failed = sorted(set(re.findall(r"^FAILED (\S+)", proc.stdout, re.M)))
    summary = (proc.stdout.strip().splitlines() or [""])[-1]
    return proc.returncode, failed, summary


def main(argv: list[str]) -> int:
    args = argv or ["tests/test_lm_gradient.py"]
    bad = 0
    with tempfile.TemporaryDirectory(prefix="lm-breakages-") as tmp:
        for name, (old, new) in [("none (the code as it is)", ("", ""))] + list(BREAKAGES.items()):
            src = Path(tmp) / "src"
            shutil.rmtree(src, ignore_errors=True)
            shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
            if old:
                text = (src / TARGET).read_text()
                if text.count(old) != 1:
                    raise SystemExit(f"breakage '{name}': the text to replace occurs {text.count(old)} times")
                (src / TARGET).write_text(text.replace(old, new))
            code, failed, summary = run_tests(src, args)
            print(f"## {name}: {summary}")
            for f in failed:
                print(f"   FAILED {f}")
            if old and not failed:
                print("   SURVIVED: no test failed")
                bad += 1
            if not old and code != 0:
                print("   the unbroken code fails")
                bad += 1
            sys.stdout.flush()
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
