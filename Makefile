# One command for the main job, one for the tests; each creates .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint

$(BIN)/dreamshard: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --progress-bar off -e '.[dev]'
	touch $@

demo: $(BIN)/dreamshard
	$(BIN)/dreamshard demo

test: $(BIN)/dreamshard
	$(BIN)/python -m pytest -q

lint: $(BIN)/dreamshard
	$(BIN)/ruff check .
