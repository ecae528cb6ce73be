#!/usr/bin/env bash
# Mutation testing of the merge-move LM's scoring, the evaluation code, the gradient LM's losses and forward, and the baselines'
# losses (mutmut; dev only: .venv/bin/pip install -r requirements-dev.txt; never run by CI).
#
#   bash scripts/mutation.sh                  # every module below, then the table
#   bash scripts/mutation.sh metrics lm       # some modules (names below)
#   JOBS=2 bash scripts/mutation.sh           # parallel mutant workers (default 1)
#
# pyproject.toml [tool.mutmut] says which files get mutants and which fast tests may run; mutmut
# first runs those tests once to map each function to the tests that execute it, then runs each
# mutant against only those tests. Mutants and results live in mutants/ (git-ignored; delete it
# after changing tests, so the map is rebuilt). The table: python scripts/mutation_report.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
# the checkout's src first (mutmut swaps in its mutated copy); MUTMUT_SITE: a --target install of
# requirements-dev.txt, when mutmut is not installed in the venv itself
export PYTHONPATH="$PWD/src${MUTMUT_SITE:+:$MUTMUT_SITE}"
# the tests run on tests/conftest.py's thread count (SIGNCLUST_TEST_THREADS, default 2, CI's), whatever is set
# here: this script's old OMP_NUM_THREADS=MKL_NUM_THREADS=1 made a mixed state in which a fast test
# failed in mutmut's stats step. So one worker by default, which has both cores.
export SIGNCLUST_MLFLOW=0

declare -A TARGETS=(
  # lm_merge: the merge-move LM's scoring (models/lm_clusterer.py): text centring, the pair model
  # (log-odds, confident pairs, fit), context counts and the Dirichlet-multinomial Bayes factor,
  # dL_hom, same-hand evidence, nearest link, rank prior, candidates and their ratio test, disjoint
  # merges, and the merge loop that adds the terms into the gain
  [lm_merge]="signclust.models.lm_clusterer.x_text_centre__mutmut_* signclust.models.lm_clusterer.xǁPairModelǁlog_odds__mutmut_*
              signclust.models.lm_clusterer.xǁPairModelǁeven_odds__mutmut_* signclust.models.lm_clusterer.x_confident_pairs__mutmut_*
              signclust.models.lm_clusterer.x_fit_pair_model__mutmut_* signclust.models.lm_clusterer.x_context_counts__mutmut_*
              signclust.models.lm_clusterer.x_log_dm__mutmut_* signclust.models.lm_clusterer.x_context_prior__mutmut_*
              signclust.models.lm_clusterer.x_lm_gain__mutmut_* signclust.models.lm_clusterer.x_hom_gain__mutmut_*
              signclust.models.lm_clusterer.x_within_text_evidence__mutmut_* signclust.models.lm_clusterer.x_nearest_link__mutmut_*
              signclust.models.lm_clusterer.x_dup_prior__mutmut_* signclust.models.lm_clusterer.x_candidate_pairs__mutmut_*
              signclust.models.lm_clusterer.x_disjoint_best__mutmut_* signclust.models.lm_clusterer.xǁLMSignClustererǁ_merge__mutmut_*"
  [metrics]="signclust.evaluation.metrics.*"
  # evaluate: the scoring path (main, the MLflow logging and train_runs are left out: the tests run
  # with MLflow off, so their mutants say nothing about the figures)
  [evaluate]="signclust.evaluation.evaluate.x_config__mutmut_* signclust.evaluation.evaluate.x_seed_folders__mutmut_*
              signclust.evaluation.evaluate.x_reduce_embedding__mutmut_* signclust.evaluation.evaluate.x_score_result__mutmut_*
              signclust.evaluation.evaluate.x_evaluate_seed__mutmut_* signclust.evaluation.evaluate.x_summarise__mutmut_*
              signclust.evaluation.evaluate.x_evaluate__mutmut_* signclust.evaluation.evaluate.x_missing_run_message__mutmut_*"
  [lm]="signclust.models.lm_gradient.x_hom_loss__mutmut_* signclust.models.lm_gradient.x_lm_loss__mutmut_*
        signclust.models.lm_gradient.x_dup_loss__mutmut_* signclust.models.lm_gradient.x_marginal_entropy__mutmut_*
        signclust.models.lm_gradient.x_similarity__mutmut_* signclust.models.lm_gradient.x__with_eos__mutmut_*
        signclust.models.lm_gradient.xǁTypeLMǁnext_type_logits__mutmut_*"
  [swav]="signclust.models.baselines.swav.x_sinkhorn__mutmut_* signclust.models.baselines.swav.xǁSwAVǁ_epoch__mutmut_*"
  [twostage]="signclust.models.baselines.twostage.x_instance_pair_loss__mutmut_*
              signclust.models.baselines.twostage.x_iic_loss__mutmut_* signclust.models.baselines.twostage.x_and_loss__mutmut_*
              signclust.models.baselines.twostage.x_ue_loss__mutmut_*"
  [deepdpm]="signclust.models.baselines.deepdpm.x_niw_log_marginal__mutmut_* signclust.models.baselines.deepdpm.x__lgamma0__mutmut_*
             signclust.models.baselines.deepdpm.x_log_hastings_split__mutmut_* signclust.models.baselines.deepdpm.x_log_hastings_merge__mutmut_*
             signclust.models.baselines.deepdpm.xǁNIWPriorǁposterior__mutmut_* signclust.models.baselines.deepdpm.xǁNIWPriorǁmap_mean__mutmut_*
             signclust.models.baselines.deepdpm.xǁNIWPriorǁmap_cov__mutmut_* signclust.models.baselines.deepdpm.x__soft_stats__mutmut_*
             signclust.models.baselines.deepdpm.x_map_params__mutmut_*"
  [jule]="signclust.models.baselines.jule.x_weighted_triplet_loss__mutmut_*"
  # dpgmm: the DP-GMM row's merge moves (models/baselines/dp_moves.py): the Normal-Gamma posterior and
  # marginal, the Student-t predictive, the merge gain, the reassignment sweeps and log p(X, z)
  [dpgmm]="signclust.models.baselines.dp_moves.*"
  # lm_select: how the merge-move LM chooses and cuts its types (models/lm_clusterer.py): the label-free
  # selection's neighbour evidence and its symbols, the split moves (2-means, permutation test,
  # Benjamini-Hochberg), the same-text avoidance, the kNN vote and the CRP seat odds
  [lm_select]="signclust.models.lm_clusterer.x_neighbour_evidence__mutmut_* signclust.models.lm_clusterer.x_neighbour_symbols__mutmut_*
               signclust.models.lm_clusterer.x_two_means__mutmut_* signclust.models.lm_clusterer.x_benjamini_hochberg__mutmut_*
               signclust.models.lm_clusterer.x_split_types__mutmut_* signclust.models.lm_clusterer.x_avoidance__mutmut_*
               signclust.models.lm_clusterer.x_near_rate__mutmut_* signclust.models.lm_clusterer.x_cohesion__mutmut_*
               signclust.models.lm_clusterer.x_knn_vote__mutmut_* signclust.models.lm_clusterer.x_crp_concentration__mutmut_*
               signclust.models.lm_clusterer.x_crp_seat_odds__mutmut_* signclust.models.lm_clusterer.x_coarse_symbols__mutmut_*"
  # reproduce: how the CI reproduction judges a figure (reports/reproduce.py): the committed figure, seed and
  # platform it is held to, the precision references and their stamps, the same-CPU and cross-CPU
  # tolerances, the README's claims and the paper check's verdicts (not the fits, rendering or CLI)
  [reproduce]="signclust.reports.reproduce.x_table_rows__mutmut_* signclust.reports.reproduce.x_reduced_params__mutmut_*
               signclust.reports.reproduce.x_fit_stamp__mutmut_* signclust.reports.reproduce.x_committed_figure__mutmut_*
               signclust.reports.reproduce.x_timings_record__mutmut_* signclust.reports.reproduce.x_committed_platform__mutmut_*
               signclust.reports.reproduce.x_encoder_precision__mutmut_* signclust.reports.reproduce.x_precision_rows__mutmut_*
               signclust.reports.reproduce.x_reference_for__mutmut_* signclust.reports.reproduce.x_cross_cpu_verdict__mutmut_*
               signclust.reports.reproduce.x_table_verdicts__mutmut_* signclust.reports.reproduce.x__row_verdicts__mutmut_*
               signclust.reports.reproduce.x_claim_verdicts__mutmut_* signclust.reports.reproduce.x_paper_verdicts__mutmut_*
               signclust.reports.reproduce.x_missing_paper_data__mutmut_*"
)
ORDER=(lm_merge metrics evaluate lm swav twostage deepdpm jule dpgmm lm_select reproduce)
modules=("$@")
[ ${#modules[@]} -eq 0 ] && modules=("${ORDER[@]}")
globs=()
for m in "${modules[@]}"; do
  [ -n "${TARGETS[$m]:-}" ] || { echo "unknown module '$m' (${ORDER[*]})" >&2; exit 2; }
  read -r -a more <<< "$(echo ${TARGETS[$m]})"
  globs+=("${more[@]}")
done
nice -n 10 "$PY" -m mutmut run --max-children "${JOBS:-1}" "${globs[@]}"
"$PY" scripts/mutation_report.py
