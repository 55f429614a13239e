# One command for the main job, one for the tests; each creates .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: pipeline demo test lint torchrec mlflow-ui dashboard browser shipped-model

# pip compiles what it installs on one core; compileall after it uses both (about 15 s less).
# As under pip, a file of newer Python's syntax (torch's py312 test helpers) stays uncompiled.
$(BIN)/dreamshard: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --progress-bar off --no-compile -e '.[cpu]'
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib > /dev/null || true
	touch $@

# What the tests and the linters need beside it.
$(VENV)/.dev: $(BIN)/dreamshard
	$(BIN)/python -m pip install --quiet --progress-bar off -e '.[cpu,dev]'
	touch $@

# The main job: collect costs, train, evaluate, as one Prefect flow run tracked in MLflow.
pipeline: $(BIN)/dreamshard
	$(BIN)/python -m flows.pipeline

demo: $(BIN)/dreamshard
	$(BIN)/dreamshard demo

# The pre-trained cost network the package ships (learn/shipped.py), remade from its seed.
shipped-model: $(BIN)/dreamshard
	$(BIN)/dreamshard pretrain --out dreamshard/learn/shipped/model.pt --seed 0

# MLflow's UI over the project's local store (runs, metrics, artifacts, registered models).
mlflow-ui: $(BIN)/dreamshard
	MLFLOW_DISABLE_TELEMETRY=true $(BIN)/mlflow ui --host 127.0.0.1 --port 5000 \
		--backend-store-uri sqlite:///$(CURDIR)/.dreamshard/mlflow.db

# The Streamlit dashboard over the same store (or $MLFLOW_TRACKING_URI), on 127.0.0.1 only.
dashboard: $(BIN)/dreamshard
	$(BIN)/streamlit run dashboard/app.py --server.address 127.0.0.1 --server.port 8501 \
		--server.headless true --browser.gatherUsageStats false --client.toolbarMode viewer

# Chromium and its driver for the dashboard's browser test: Debian's packages, installed with
# apt-get (as root, as in CI) only when either is missing.
$(VENV)/.chromium: $(BIN)/dreamshard
	test -x /usr/bin/chromium && test -x /usr/bin/chromedriver || \
		(apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium chromium-driver)
	touch $@

browser: $(VENV)/.chromium

# TorchRec (optional: --method torchrec, round-trip tests) without the CUDA fbgemm a plain
# install pulls: its dependencies pinned first, then torchrec itself with --no-deps.
$(VENV)/.torchrec: $(BIN)/dreamshard
	$(BIN)/python -m pip install --quiet --progress-bar off tensordict==0.15.3 \
		torchmetrics==1.0.3 pyre-extensions==0.0.32 tqdm==4.70.1
	$(BIN)/python -m pip install --quiet --progress-bar off --no-deps torchrec==1.8.0
	touch $@

torchrec: $(VENV)/.torchrec

# --durations=15: the slowest tests' times, so CI's log shows where the time goes. Two workers
# (pytest-xdist), a test module's tests on one (its fixtures made once): much of the suite
# waits on servers and subprocesses, so two cores finish it in about 9.5 minutes, not 16; the
# longest modules go first (tests/conftest.py, LONGEST_FIRST), so none runs alone at the end.
test: $(VENV)/.dev $(VENV)/.torchrec $(VENV)/.chromium
	$(BIN)/python -m pytest -q -n 2 --dist loadscope --durations=15

lint: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
