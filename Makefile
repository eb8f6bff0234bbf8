# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create .venv and install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SHARED ?= ../shared
EXAMPLES := $(SHARED)/examples

.PHONY: demo test bench bench-replay screenshots venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,ray]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/suanli schedule $(EXAMPLES)/city-fleet.yaml $(EXAMPLES)/tenants.yaml $(EXAMPLES)/static-heterogeneous.yaml
	$(BIN)/suanli simulate $(EXAMPLES)/autodrive.yaml --out demo-out/autodrive
	$(BIN)/suanli simulate $(EXAMPLES)/ai-hpc-mix.yaml --out demo-out/ai-hpc-mix
	@echo "reports: demo-out/autodrive/report.html demo-out/ai-hpc-mix/report.html"
	@echo "console: $(BIN)/suanli view demo-out/autodrive    (then open http://127.0.0.1:8090/; --port to change)"
	@echo "         $(BIN)/suanli view demo-out/ai-hpc-mix --port 8091"

# one worker per core, each taking whole files (their servers and clusters are shared within a file)
test: $(STAMP)
	$(BIN)/python -m pytest -n auto --dist loadfile --no-loadscope-reorder

bench: $(STAMP)
	$(BIN)/python bench/bench_decisions.py
	$(BIN)/python bench/bench_static.py
	$(BIN)/python bench/bench_static.py --gangs 500
	$(BIN)/python bench/bench_simulate.py
	$(BIN)/python bench/bench_fgd.py
	$(BIN)/python bench/bench_serve.py
	$(BIN)/python bench/bench_serve.py --streams 100
	$(BIN)/python bench/bench_executors.py --executor local --tasks 1000
	$(BIN)/python bench/bench_executors.py --executor ray --tasks 200 --rate 20

# every view of the console, 1400 px wide, for docs/console.md (needs Chromium: apt-get install chromium)
screenshots: $(STAMP)
	$(BIN)/python tests/screenshots.py docs/console

# the long ones: a million-pod trace replayed through suanli simulate, and a
# million pending tasks on 100,000 nodes
bench-replay: $(STAMP)
	$(BIN)/python bench/bench_replay.py
	$(BIN)/python bench/bench_size.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
