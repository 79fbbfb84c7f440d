# fraglib — every command of the README lives here.
#   make          the main job: create the environment if missing, then `dvc repro` (its timeline: benchmarks/timeline.json)
#   make test     the test suite (.ci/run calls `make`, then this)
#   make bench    benchmarks -> benchmarks/results.json
#   make reports  every report page, docs/results.md and reports/index.html from the committed results (no training)
#   make pascal1k the Pascal1K study (params.yaml pascal1k.root points at the data)
#   make pascal1k-folds  only its k-fold runs (pascal1k.fold_runs; the claims' and the fight's runs, ten folds)
#   (the study targets, as make, run the pool: the stages side by side; FRAGLIB_DASK_SCHEDULER=tcp://HOST:8786 on a cluster)
#   make flickr8k the Flickr8K text-only study and transfer (after `make pascal1k`; flickr8k.root)
#   make study STUDY=<name>  any study's pipeline, studies/<name>/dvc.yaml (a new dataset's: docs/adding_a_dataset.md)
#   make synthetic-all  the extended synthetic study (every other run; after `make`) and its results page
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(abspath $(VENV))/bin
STAMP  := $(VENV)/.fraglib-installed
UV_VERSION := 0.13.9
export PATH := $(BIN):$(PATH)
# the wall time of a target's work (after the environment), recorded in benchmarks/costs.json when it ends well
# (fraglib_study/audit/costs.py; the cost table on reports/index.html): $(call clock,start|stop,<target name>)
empty :=
space := $(empty) $(empty)
clock = @$(BIN)/python -m fraglib_study costs $(1) $(VENV)/.clock-$(subst $(space),-,$(2))$(if $(filter stop,$(1)), "$(2)")

.PHONY: all env repro pascal1k pascal1k-folds flickr8k study synthetic-all test browser bench light lab reports clean-env
all: repro

env: $(STAMP)
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# uv installs the pins of pyproject.toml as pip would, faster: 1.0 min from a fresh clone here (bytecode
	@# included), pip 3.9.
	@# --compile-bytecode, as pip does: without .pyc files (and with PYTHONDONTWRITEBYTECODE, as in CI) every
	@# process compiled torch again: import torch + torch._dynamo 12.4 s instead of 7.0 here
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e ".[text,vision,study,dev]"
	$(BIN)/python -m ipykernel install --sys-prefix --name fraglib --display-name "Python (fraglib)"
	@touch $@

# `make`: the pool (fraglib_study/experiments/pool.py) runs the stages of dvc.yaml that are not up to date side by side
# on one local Dask cluster, each as soon as the stages it depends on are done (a study stage as its training units,
# longest first; a page on one core, dvc.yaml's meta.cores), committing each to DVC as it ends; `dvc repro` then
# finds every stage up to date. FRAGLIB_DASK_SCHEDULER=tcp://HOST:8786 sends the units to a cluster (docs/scale.md).
# Its timeline (fraglib_study/bench/timeline.py) goes to benchmarks/timeline.json: each stage's start and end, the
# training units', the cores' use every second; the output and exit status stay the commands'. A figure of it:
# python -m fraglib_study bench timeline draw benchmarks/timeline.json --out timeline.svg
repro: env
	$(call clock,start,make)
	$(BIN)/python -m fraglib_study bench timeline record --out benchmarks/timeline.json -- sh -c '$(BIN)/python -m fraglib_study pool dvc.yaml && $(BIN)/dvc repro'
	$(call clock,stop,make)

pascal1k: env
	$(call clock,start,make pascal1k)
	$(BIN)/python -m fraglib_study pool studies/pascal1k/dvc.yaml && $(BIN)/dvc repro studies/pascal1k/dvc.yaml
	$(call clock,stop,make pascal1k)

pascal1k-folds: env
	$(call clock,start,make pascal1k-folds)
	$(BIN)/python -m fraglib_study pool studies/pascal1k/dvc.yaml:train_folds studies/pascal1k/dvc.yaml:captions_folds
	$(call clock,stop,make pascal1k-folds)

flickr8k: env
	$(call clock,start,make flickr8k)
	$(BIN)/python -m fraglib_study pool studies/flickr8k/dvc.yaml && $(BIN)/dvc repro studies/flickr8k/dvc.yaml
	$(call clock,stop,make flickr8k)

# any study of studies/<name>/dvc.yaml, a new dataset's included (docs/adding_a_dataset.md): make study STUDY=<name>
study: env
	@test -n "$(STUDY)" || { echo "make study: name the study, e.g. make study STUDY=flickr30k" >&2; exit 2; }
	$(BIN)/python -m fraglib_study pool studies/$(STUDY)/dvc.yaml && $(BIN)/dvc repro studies/$(STUDY)/dvc.yaml

synthetic-all: env
	$(call clock,start,make synthetic-all)
	$(BIN)/python -m fraglib_study pool studies/synthetic/dvc.yaml && $(BIN)/dvc repro studies/synthetic/dvc.yaml
	$(call clock,stop,make synthetic-all)

# one pytest worker per core (at most TEST_WORKERS), one thread each (tests/conftest.py); worksteal balances
# the few minute-long tests (dvc repro, every report page) against the many short ones
TEST_WORKERS ?= 4
test: env browser
	$(call clock,start,make test)
	$(BIN)/python -m pytest -q -n auto --maxprocesses $(TEST_WORKERS) --dist worksteal
	$(call clock,stop,make test)

# the browser tests (tests/test_browser.py) drive Debian's chromium: installed here when missing and apt-get is ours
# to use (root); otherwise those tests skip, saying so
CHROMIUM_APT := apt-get install -y -qq --no-install-recommends chromium >/dev/null
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		{ $(CHROMIUM_APT) 2>/dev/null || { apt-get update -qq && $(CHROMIUM_APT); }; }; } || \
		echo "no chromium (not root, or no apt-get): tests/test_browser.py skips"

bench: env
	$(BIN)/python -m fraglib_study bench

# the library installed light (its required dependencies only, no extra) in a virtual environment of its own:
# another tool's score matrix scored and a small system trained there (tests/light_check.py)
LIGHT ?= .venv-light
light: env
	$(BIN)/uv venv -q --allow-existing --python $(BIN)/python $(LIGHT)
	$(BIN)/uv pip install -q --python $(LIGHT)/bin/python --reinstall-package fraglib .
	$(LIGHT)/bin/python tests/light_check.py

reports: env
	$(call clock,start,make reports)
	$(BIN)/python -m fraglib_study reports
	$(call clock,stop,make reports)

lab: env
	$(BIN)/jupyter lab notebooks/

clean-env:
	rm -rf $(VENV)
