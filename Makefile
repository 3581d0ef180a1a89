# Two commands set everything up on a fresh machine: `make demo` and `make test`.
# Both create the virtualenv and install the project into it on first use.
# `make chaos` runs the long chaos soak (about 12 minutes; docs/testing.md).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench chaos install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Runs the worked examples on the embedded SQLite default (./durable_adk.db).
demo: $(STAMP)
	$(BIN)/durable-adk demo

# The whole suite, both backends. PostgreSQL is started by the test setup;
# with DURABLE_ADK_REQUIRE_POSTGRES=1 (as .ci/run sets) a missing server fails
# instead of skipping. pytest exits 5 when it collected no test: that fails too.
# Three xdist workers on two cores: most tests wait on child processes, sleeps
# and commits, so two workers left a third of the CPU idle (docs/testing.md).
# Work stealing: an idle xdist worker takes tests queued for another, so the
# last minutes are not one worker alone with a long tail.
test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 3 --dist worksteal --durations=25 tests

lint: $(STAMP)
	$(BIN)/ruff check src tests bench $(wildcard examples)
	$(BIN)/ruff format --check src tests bench $(wildcard examples)
	$(BIN)/mypy --strict src/durable_adk

# The chaos soak (docs/testing.md, "Chaos soak"): 3 `durable-adk serve` workers
# on a private PostgreSQL, 10 minutes of runs with random SIGKILL, SIGSTOP past
# the lease, PostgreSQL restarts, a failover to a synchronous standby, rolling deploys (compatible and pinned in
# turn; from 1.3 on the approval tool is dropped, so older paused approvals
# are parked for drift) and, as root, a network partition; prints the verdict
# table and fails on any violation. CHAOS_ARGS adds options (--seed 7).
chaos: $(STAMP)
	$(BIN)/python -m durable_adk.chaos --duration 600 --workers 3 --runs 400 \
		--tool-seconds 1.0 --settle 180 --rollout alternate \
		--drop-approvals-from 3 $(CHAOS_ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) build dist *.egg-info
