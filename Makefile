# demo2rl: the two commands a newcomer needs are `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORES ?= all
SNAKEMAKE := $(BIN)/snakemake
PORT ?= 5000
RESULTS_DIR ?= results

.PHONY: venv run export test test-fast lint format reruns-doc report ui bench diagnose diagnose-cost tune-sac clean help

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

venv: $(STAMP)  ## create .venv with the pinned dependencies and demo2rl (editable)

# uv installs the pinned versions (requirements/constraints.txt: the same packages pip chose)
# and byte-compiles them, on all cores, in about 40 s where pip took 70 s; compiled at install,
# since a machine that sets PYTHONDONTWRITEBYTECODE would compile every import of every job.
# torch==2.13.0 is the CPU wheel where pip's find-links hold one (PIP_FIND_LINKS, /opt/wheels).
UV_VERSION := 0.13.9
FIND_LINKS ?= $(firstword $(PIP_FIND_LINKS) $(wildcard /opt/wheels))

$(STAMP): pyproject.toml requirements/constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)
	$(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode \
		$(if $(FIND_LINKS),--find-links $(FIND_LINKS)) \
		-c requirements/constraints.txt torch==2.13.0 -e '.[dev]'
	touch $@

run: venv  ## run the default workflow (config/config.yaml) on all cores
	$(SNAKEMAKE) --cores $(CORES)

export: venv  ## the dataset of `make run` as a Minari dataset -> results/<experiment>/demos/minari (docs/dataset.md#minari)
	$(SNAKEMAKE) --cores $(CORES) export

report: venv  ## HTML report of the last `make run` (plots, tables, captions) -> results/report.html
	$(SNAKEMAKE) --report results/report.html

ui: venv  ## MLflow UI of results/mlflow.db on 127.0.0.1:PORT (default 5000), links to the arms; Ctrl-C stops it
	@echo "MLflow UI: http://127.0.0.1:$(PORT)  (from your laptop: ssh -N -L $(PORT):127.0.0.1:$(PORT) <this host>)"
	@$(BIN)/python -m demo2rl.tracking.ui $(RESULTS_DIR) http://127.0.0.1:$(PORT) \
		|| echo "  (the experiments' links could not be read from $(RESULTS_DIR)/mlflow.db)"
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false exec $(BIN)/mlflow server --host 127.0.0.1 --port $(PORT) \
		--backend-store-uri sqlite:///$(abspath $(RESULTS_DIR)/mlflow.db) \
		--artifacts-destination $(abspath $(RESULTS_DIR)/mlartifacts)

# pytest-xdist: `make test` runs 4 workers on 2 cores, as much of the suite waits (on
# subprocesses, servers, the SLURM cluster) rather than computes. Tests that share a module's
# cluster or servers stay on one worker (xdist_group marks, --dist loadgroup); the tests marked
# slow start first (tests/conftest.py), in that order (--no-loadscope-reorder). The unit tests
# only compute: 2 workers. WORKERS=0 runs everything in this process.
WORKERS ?= 4
FAST_WORKERS ?= 2
XDIST = --dist loadgroup --no-loadscope-reorder

test: venv lint  ## lint, then every test: unit + integration (real workflow, MLflow, SLURM, Chromium)
	$(BIN)/python -m pytest -n $(WORKERS) $(XDIST)

test-fast: venv  ## unit tests only (no workflow runs, servers or cluster): the edit-test loop
	$(BIN)/python -m pytest -n $(FAST_WORKERS) $(XDIST) -m "not integration and not slow"

lint: venv  ## static checks only
	$(BIN)/ruff check src scripts tests benchmarks
	$(BIN)/ruff format --check src scripts tests benchmarks
	$(BIN)/snakefmt --check Snakefile rules
	$(SNAKEMAKE) --lint --configfile config/test.yaml

# the rerun matrix's test (tests/test_rerun_matrix.py) writes the page with the matrix it found
# to results/reruns.md and fails if it differs from docs/reruns.md; the page then replaces the doc
reruns-doc: venv  ## regenerate the rerun matrix in docs/reruns.md (runs the test config: minutes)
	mkdir -p $(RESULTS_DIR) && rm -f $(RESULTS_DIR)/reruns.md
	DEMO2RL_RERUN_DOC_OUT=$(abspath $(RESULTS_DIR)/reruns.md) $(BIN)/python -m pytest -q \
		tests/test_rerun_matrix.py -k test_reruns_doc_shows_the_matrix || test -f $(RESULTS_DIR)/reruns.md
	cp $(RESULTS_DIR)/reruns.md docs/reruns.md

format: venv  ## apply ruff and snakefmt formatting
	$(BIN)/ruff check --fix src scripts tests benchmarks
	$(BIN)/ruff format src scripts tests benchmarks
	$(BIN)/snakefmt Snakefile rules

bench: venv  ## run the speed benchmarks (figures to results/bench/*.json)
	for b in benchmarks/collect.py benchmarks/bc.py benchmarks/rl.py benchmarks/tracking.py \
		benchmarks/untracked.py benchmarks/pixels.py benchmarks/offpolicy.py; do \
		$(BIN)/python $$b || exit 1; done

DIAGNOSIS = scratch bc residual kickstart bc:warm_start.log_std=-1.0 bc:warm_start.log_std=-0.5 \
	bc:warm_start.log_std=0.0 bc:warm_start.critic_warmup_steps=40960 bc:ppo.learning_rate=0.0001 \
	bc:warm_start.bc_coef=0.1 residual:residual.log_std=-0.5 kickstart:kickstart.decay=0.1

diagnose: venv  ## the diagnosis of the RL arms (docs/arms.md), on the runs of `make run` (about 15 min)
	$(BIN)/python benchmarks/arms.py --results results/racing --name diagnosis --episodes heldout \
		--variants $(DIAGNOSIS)

COST_RLPD = rlpd:sac.eval_every=5000,sac.compile
COST_DIAGNOSIS = scratch:eval_every=10000 residual:eval_every=10000 \
	$(COST_RLPD)=false,sac.updates_per_step=0.125 \
	sac:sac.eval_every=5000,sac.compile=false,sac.updates_per_step=0.125 \
	$(COST_RLPD)=true,sac.updates_per_step=0.125 $(COST_RLPD)=true,sac.updates_per_step=0.0625 \
	$(COST_RLPD)=true,sac.updates_per_step=0.125,sac.batch_size=128 \
	'$(COST_RLPD)=true,sac.updates_per_step=0.125,sac.batch_size=128,sac.critic_net_arch=[128,128]' \
	'$(COST_RLPD)=false,sac.updates_per_step=0.125,sac.critic_net_arch=[64,64]'

# the first two rounds start from config/offpolicy.yaml's SAC setting (one update of 256 per env
# step on 16 envs, a constant learning rate: the default until the third round)
# the second round, around the cheapest setting that got to 85 soonest (16 samples per env step)
COST_BASE = $(COST_RLPD)=true,sac.updates_per_step=0.125,sac.batch_size=128
COST_SETTINGS = scratch:eval_every=10000 $(COST_BASE) $(COST_BASE),sac.policy_delay=2 \
	$(COST_BASE),sac.n_steps=1 $(COST_BASE),rlpd.demo_fraction=0.25 $(COST_BASE),sac.n_critics=1 \
	$(COST_BASE),sac.n_envs=64 $(COST_RLPD)=true,sac.updates_per_step=0.25,sac.batch_size=128,sac.policy_delay=2

# the third round, on config.yaml's SAC settings (chosen by it) but for the actor delay (1 then):
# 64 envs, 0.125 updates of 128 per env step; the learning rate constant or decaying to 0 from
# 3e-4 or 6e-4, 60k env steps, 0.0625 updates of 256, 80k env steps; each rlpd setting that ends
# high beside its sac control
D1 = sac.policy_delay=1
COST_ENDS = scratch:eval_every=10000 rlpd:sac.learning_rate=0.0003,$(D1) \
	rlpd:sac.learning_rate=lin_0.0003,$(D1) sac:sac.learning_rate=lin_0.0003,$(D1) \
	rlpd:sac.learning_rate=lin_0.0003,sac.total_timesteps=60000,$(D1) \
	sac:sac.learning_rate=lin_0.0003,sac.total_timesteps=60000,$(D1) \
	rlpd:sac.learning_rate=lin_0.0003,sac.updates_per_step=0.0625,sac.batch_size=256,$(D1) \
	sac:sac.learning_rate=lin_0.0003,sac.updates_per_step=0.0625,sac.batch_size=256,$(D1) \
	rlpd:sac.updates_per_step=0.0625,sac.batch_size=256,$(D1) \
	rlpd:sac.total_timesteps=80000,$(D1) sac:sac.total_timesteps=80000,$(D1) \
	rlpd:$(D1) sac:$(D1)

# the fourth round, around the third's end (config.yaml's SAC settings today): the actor delay
# (1 or 2, each beside its sac control), critics [192, 192], the update run eagerly
COST_DELAY = scratch:eval_every=10000 rlpd:$(D1) sac:$(D1) rlpd sac \
	'rlpd:sac.critic_net_arch=[192,192],$(D1)' rlpd:sac.compile=false,$(D1)

diagnose-cost: venv  ## what the demo arms cost in CPU seconds and env steps (docs/arms.md), on the dataset and clone of `make run` (about 125 min)
	$(BIN)/python benchmarks/arms.py --results results/racing --name cost --variants $(COST_DIAGNOSIS) \
		--config config/offpolicy.yaml
	$(BIN)/python benchmarks/arms.py --results results/racing --name cost-settings \
		--variants $(COST_SETTINGS) --config config/offpolicy.yaml
	$(BIN)/python benchmarks/arms.py --results results/racing --name cost-ends --variants $(COST_ENDS)
	$(BIN)/python benchmarks/arms.py --results results/racing --name cost-delay --variants $(COST_DELAY)

TUNE_SAC_RUN = sac.total_timesteps=40000,sac.eval_every=10000,sac.ent_coef
TUNE_SAC = rlpd:$(TUNE_SAC_RUN)=auto rlpd:$(TUNE_SAC_RUN)=auto_0.1 rlpd:$(TUNE_SAC_RUN)=auto_0.01 \
	rlpd:$(TUNE_SAC_RUN)=auto_0.001 sac:$(TUNE_SAC_RUN)=auto_0.1 sac:$(TUNE_SAC_RUN)=auto_0.01

tune-sac: venv  ## the SAC arms' entropy start on tuning tracks (docs/arms.md), on the dataset and clone of `make run` (about 35 min)
	$(BIN)/python benchmarks/arms.py --results results/racing --name tune-sac --seeds 0 \
		--variants $(TUNE_SAC) --config config/offpolicy.yaml

clean:  ## remove generated results (keeps .venv)
	rm -rf results/* .snakemake
