# The two commands of the README. Both install whatever is missing first.
export MLFLOW_DISABLE_TELEMETRY=true
VENV := .venv/bin

.PHONY: setup repro repro-full test mlflow-ui
setup:
	@bash scripts/setup.sh

repro: setup  ## the main job: dvc repro (dvc.yaml: every row on the built-in corpus cypriot, minutes)
	PATH="$(CURDIR)/.venv/bin:$$PATH" $(VENV)/dvc repro

repro-full: setup  ## every table of the README: dvc.yaml and full/dvc.yaml (hours on 2 cores)
	PATH="$(CURDIR)/.venv/bin:$$PATH" $(VENV)/dvc repro --all-pipelines

test: setup  ## the test suite (what CI runs)
	$(VENV)/python -m pytest -q

mlflow-ui: setup
	$(VENV)/mlflow ui --backend-store-uri sqlite:///mlflow.db --host 127.0.0.1 --port 5000 --workers 1
