# The two commands of the README. Both install whatever is missing first.
export MLFLOW_DISABLE_TELEMETRY=true
VENV := .venv/bin

.PHONY: setup repro test mlflow-ui
setup:
	@bash scripts/setup.sh

repro: setup  ## the main job: dvc repro on the built-in corpora
	PATH="$(CURDIR)/.venv/bin:$$PATH" $(VENV)/dvc repro

test: setup  ## the test suite (what CI runs)
	$(VENV)/python -m pytest -q

mlflow-ui: setup
	$(VENV)/mlflow ui --backend-store-uri sqlite:///mlflow.db --host 127.0.0.1 --port 5000 --workers 1
