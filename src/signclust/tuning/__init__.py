"""Hyperparameter search (Optuna) for our LM clusterer and the baselines: ``signclust.tuning.tune``."""
