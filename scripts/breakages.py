"""Apply known breakages to a scratch copy of src/ and run the tests that must catch them.

    python scripts/breakages.py            # every breakage
    python scripts/breakages.py lm         # one group: lm (the gradient LM), metrics, baselines

Each breakage is one exact text replacement in one source file (it must match exactly once) and
names the test files to run. The source tree of this checkout is never modified: every breakage runs
on its own copy under a temporary folder, with PYTHONPATH pointing there. Prints, per breakage, the
tests that failed; exits 1 if a breakage survives (no test failed) or the unbroken code fails a test.
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
LM = "signclust/models/lm_gradient.py"
LM_TESTS = ["tests/test_lm_gradient.py"]
METRICS = "signclust/evaluation/metrics.py"
METRICS_TESTS = ["tests/test_references.py", "tests/test_evaluation.py"]
BASELINE_TESTS = ["tests/test_references.py", "tests/test_baselines_a.py", "tests/test_baselines_b.py",
                  "-m", "not slow"]

# group -> name -> (file under src/, text, replacement, pytest arguments)
BREAKAGES = {
    "lm": {
        "causal shift removed (the LSTM sees the current token)": (
            LM, "[self.bos.expand(len(x), 1, -1), x if past_end else x[:, :-1]]",
            "[x, self.bos.expand(len(x), 1, -1)] if past_end else [x]", LM_TESTS),
        "end-of-text target off by one (_with_eos)": (
            LM, "    lengths = mask.sum(1)\n", "    lengths = mask.sum(1) - 1\n", LM_TESTS),
        "kernel similarity not squared": (
            LM, "torch.exp(-(d / scale) ** 2)", "torch.exp(-(d / scale))", LM_TESTS),
        "median distance scale dropped": (
            LM, 'similarity(d_ex, p["dup_similarity"], max(scale, 1e-6))',
            'similarity(d_ex, p["dup_similarity"], 1.0)', LM_TESTS),
    },
    "metrics": {
        "fixed-K: max over K instead of the mean": (
            METRICS, '"fixed_k_v_measure": float(np.mean(list(per_k.values())))',
            '"fixed_k_v_measure": float(np.max(list(per_k.values())))', METRICS_TESTS),
        "fixed-K: clamped K values not de-duplicated (mean over the 7 offsets)": (
            METRICS, '"fixed_k_v_measure": float(np.mean(list(per_k.values())))',
            '"fixed_k_v_measure": float(np.mean([per_k[min(max(2, k_true + o), n)] for o in offsets]))',
            METRICS_TESTS),
    },
    "baselines": {
        "DeepDPM: log alpha dropped from the Hastings ratio": (
            "signclust/models/baselines/deepdpm.py", "return (math.log(alpha) + _lgamma0(n1)",
            "return (_lgamma0(n1)", BASELINE_TESTS),
        "SwAV: each view predicts its own codes (no swap)": (
            "signclust/models/baselines/swav.py", "                    if v != i:\n",
            "                    if v == i:\n", BASELINE_TESTS),
        "Two-stage: AUG negatives' log(1 - p) term dropped": (
            "signclust/models/baselines/twostage.py", "return -(log_p_pos + (log_not * neg_mask).sum(1)).mean()",
            "return -(log_p_pos).mean()", BASELINE_TESTS),
    },
}


def run_tests(src: Path, args: list[str]) -> tuple[int, list[str], str]:
    env = dict(os.environ, PYTHONPATH=str(src))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    failed = sorted(set(re.findall(r"^FAILED (\S+)", proc.stdout, re.M)))
    summary = (proc.stdout.strip().splitlines() or [""])[-1]
    return proc.returncode, failed, summary


def main(argv: list[str]) -> int:
    groups = argv or list(BREAKAGES)
    unknown = [g for g in groups if g not in BREAKAGES]
    if unknown:
        raise SystemExit(f"unknown group(s) {unknown}; groups: {', '.join(BREAKAGES)}")
    cases = [(f"{g}: none (the code as it is)", (None, "", "", _union(BREAKAGES[g])))
             for g in groups] + [(f"{g}: {name}", case) for g in groups for name, case in BREAKAGES[g].items()]
    bad = 0
    with tempfile.TemporaryDirectory(prefix="breakages-") as tmp:
        for name, (target, old, new, args) in cases:
            src = Path(tmp) / "src"
            shutil.rmtree(src, ignore_errors=True)
            shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
            if old:
                text = (src / target).read_text()
                if text.count(old) != 1:
                    raise SystemExit(f"breakage '{name}': the text to replace occurs {text.count(old)} times")
                (src / target).write_text(text.replace(old, new))
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


def _union(group: dict) -> list[str]:
    """The pytest arguments of a group's breakages, in order, once each (options keep their value)."""
    out: list[str] = []
    for *_, args in group.values():
        i = 0
        while i < len(args):
            item = args[i:i + 2] if args[i].startswith("-") else args[i:i + 1]
            if not any(out[j:j + len(item)] == item for j in range(len(out))):
                out += item
            i += len(item)
    return out


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
