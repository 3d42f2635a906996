# mdsd: multi-draft speculative decoding experiments.
# Everything runs inside .venv, created from the system python3 on first use.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.mdsd-installed

.DEFAULT_GOAL := help
SWEEPS := draft-samplers verifier-gap num-drafts scaling
EXPERIMENTS := $(SWEEPS) tree-decode draft-design
SCRIPTS := sequence-level
JOBS ?= 2
.PHONY: help install test lint bound bench clean reproduce figures findings check-results train-pystdlib-check $(EXPERIMENTS) $(SCRIPTS)

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F ':.*?## ' '{printf "  make %-15s %s\n", $$1, $$2}'
	@for e in $(SWEEPS); do printf "  make %-15s %s\n" $$e "One experiment: sweep experiments/$$e.toml into results/$$e/, then its figures"; done

# torch is pinned to the CPU build first (a wheel on disk here), so that the
# extra's range is already met and pip never pulls a multi-GB CUDA build.
TORCH ?= torch==2.13.0

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet '$(TORCH)'
	$(BIN)/python -m pip install --quiet -e '.[dev,hf]'
	@touch $(STAMP)

install: $(STAMP) ## Create .venv and install mdsd with its dev tools and the hf extra (CPU torch)

test: $(STAMP) ## Install if needed, then run the test suite
	$(BIN)/python -m pytest -q -n auto --maxprocesses 4

lint: $(STAMP) ## Static checks (ruff)
	$(BIN)/ruff check mdsd_cli tests benchmarks experiments

bound: $(STAMP) ## Main job: α* for the built-in synthetic pairs, every sampler, n = 1..4
	@$(BIN)/mdsd bound --synthetic zipf --pairs 8 --vocab 32000 --seed 0 \
		--sampler iid --sampler wor --sampler greedy -n 1 -n 2 -n 3 -n 4

bench: $(STAMP) ## Every performance target as a ratio to a baseline timed in the same run
	@$(BIN)/mdsd bench -f table

reproduce: $(STAMP) ## Main job: all seven experiments, their figures and FINDINGS.md into results/
	@for e in $(EXPERIMENTS) $(SCRIPTS); do $(MAKE) --no-print-directory $$e || exit 1; done
	@$(MAKE) --no-print-directory findings

$(SWEEPS): $(STAMP)
	@$(BIN)/mdsd sweep experiments/$@.toml --out results/$@ --jobs $(JOBS)
	@$(BIN)/mdsd plot results/$@ --quiet

tree-decode: $(STAMP) ## Draft trees on pydoc-ngram, the shipped neural pair and a V = 32,000 synthetic pair: expected tokens per call at shared contexts (paired), and a generation check
	@mkdir -p results/$@
	@$(BIN)/mdsd decode --config experiments/$@-expected.toml --jobs $(JOBS) --out results/$@/expected.csv \
		--comparisons results/$@/comparisons.csv --per-context results/$@/contexts.parquet
	@$(BIN)/mdsd decode --config experiments/$@.toml --jobs $(JOBS) --out results/$@/summary.csv \
		--timings results/$@/timings.csv --per-prompt results/$@/prompts.csv --steps results/$@/steps.parquet
	@$(BIN)/mdsd decode --config experiments/$@-pystdlib.toml --jobs $(JOBS) --out results/$@/pystdlib-expected.csv \
		--comparisons results/$@/pystdlib-comparisons.csv --per-context results/$@/pystdlib-contexts.parquet
	@$(BIN)/mdsd decode --config experiments/$@-synthetic.toml --jobs $(JOBS) --out results/$@/synthetic-summary.csv \
		--timings results/$@/synthetic-timings.csv
	@$(BIN)/mdsd plot results/$@ --quiet

draft-design: $(STAMP) ## Draft-law design on pydoc-ngram and zipf-32k: the best temperature, top-k, top-p, hybrid per (T, n)
	@mkdir -p results/$@
	@$(BIN)/mdsd design --config experiments/$@.toml --out results/$@/summary.csv
	@$(BIN)/mdsd plot results/$@ --quiet

sequence-level: $(STAMP) ## Per-node vs sequence-level verifiers against the sequence-level bounds (exact on V = 4, pydoc-ngram depth 2)
	@$(BIN)/python experiments/sequence_level.py results/$@

figures: $(STAMP) ## Redraw every figure from the tables in results/
	@for e in $(EXPERIMENTS); do $(BIN)/mdsd plot results/$$e || exit 1; done

check-results: $(STAMP) ## Compare the tables in results/ with the committed ones (timings left out) within 1e-9
	@$(BIN)/python experiments/compare_results.py results

findings: $(STAMP) ## Check the expected findings against results/ and write results/FINDINGS.md
	@$(BIN)/python experiments/findings.py results > results/FINDINGS.md.tmp && mv results/FINDINGS.md.tmp results/FINDINGS.md
	@cat results/FINDINGS.md

train-pystdlib-check: $(STAMP) ## Retrain the shipped pystdlib pair (~20 min, 2 cores); held-out perplexities within 2% of its manifest
	@$(BIN)/python -m mdsd_cli.models.train --out build/pystdlib-check --seed 0 \
		--check mdsd_cli/models/pystdlib/manifest.json

clean: ## Remove the virtual environment and caches
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
