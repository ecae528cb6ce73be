"""Dev -> test transfer: the best and the configured parameters fitted on another labelled corpus.

Tuning and reporting never share gold labels: ``--report-on`` must name another corpus. The
result is stored in the study (user attribute ``transfer``) and reused while the best trial, the
two configurations and the seeds are unchanged.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from signclust.config import REPO_ROOT
from signclust.data.corpus import Corpus
from signclust.errors import UserError
from signclust.evaluation.label_free import CorpusData
from signclust.tuning.objective import fit_and_score
from signclust.tuning.study import base_config, best_config


def report_corpus(report_on: str, report_on_dir: Path | None, mmap: bool = False) -> Corpus:
    """The ``--report-on`` corpus, or one UserError: it must exist and have gold labels. ``tune`` calls it
    before the first trial too, so that a misspelt name is not found only after the whole budget."""
    corpus = Corpus.load(report_on_dir or REPO_ROOT / "data" / "corpora" / report_on, mmap=mmap)
    if not corpus.has_labels:
        raise UserError(f"--report-on corpus '{report_on}' has no gold labels to report against")
    return corpus


def transfer_configs(method: str, params: dict, cfg: dict, study) -> dict:
    return {"tuned": best_config(study, method, params, cfg)[1], "configured": base_config(method, params, cfg)}


def up_to_date(study, report_on: str, seeds: list[int], configs: dict) -> bool:
    done = study.user_attrs.get("transfer") or {}
    same = {"corpus": report_on, "seeds": seeds, "trial": study.best_trial.number, "configs": configs}
    return all(done.get(k) == v for k, v in same.items())


def run_transfer(method: str, tuning_corpus: str, report_on: str, report_on_dir: Path | None, params: dict,
                 cfg: dict, study, seeds: list[int], configs: dict) -> dict:
    """Best and configured parameters fitted on another labelled corpus, over ``seeds``."""
    from signclust.evaluation import evaluate as ev
    from signclust.evaluation.ablation import SCALAR_KEYS
    if report_on == tuning_corpus:
        raise UserError("--report-on must name a different corpus than --corpus: never tune and report "
                        "on the same gold labels")
    data = CorpusData(report_corpus(report_on, report_on_dir), report_on)
    device = (params.get("train") or {}).get("device", "auto")
    eval_cfg = ev.config(params)
    out = {"corpus": report_on, "seeds": seeds, "trial": study.best_trial.number, "configs": configs}
    for name, conf in configs.items():
        per_seed = {}
        for seed in seeds:
            per_seed[f"seed{seed}"] = fit_and_score(method, conf, data, seed, device, cfg["unsupervised"],
                                                    fixed_k=True, eval_cfg=eval_cfg)
            print(f"transfer {name} on {report_on} seed {seed}: V {per_seed[f'seed{seed}']['v_measure']:.3f}",
                  flush=True)
        # the scores, and the wall time per fit that the tune report's `s / fit` column shows
        mean, std = ev.summarise(per_seed, int(eval_cfg["std_ddof"]), SCALAR_KEYS + ("seconds",))
        extra = [k for k in ("unsupervised",) if all(k in s for s in per_seed.values())]
        for k in extra:
            mean[k] = float(np.mean([s[k] for s in per_seed.values()]))
        out[name] = {"mean": mean, "std": std, "per_seed": per_seed}
    return out
