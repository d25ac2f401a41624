# intent-spark: `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3.11
# A stack is an exact, tested set of versions (conf/stacks/NAME.txt, a pip constraints file whose
# header names its extras, its jars and its chain's options): newest (the default, .venv), dbr-17.3,
# petastorm, spark-3.5 (.venv-NAME).
STACK ?= newest
STACK_FILE := conf/stacks/$(STACK).txt
ifeq ($(wildcard $(STACK_FILE)),)
$(error STACK=$(STACK): no $(STACK_FILE); stacks: $(basename $(notdir $(wildcard conf/stacks/*.txt))))
endif
VENV ?= $(if $(filter newest,$(STACK)),.venv,.venv-$(STACK))
PY := $(VENV)/bin/python
EXTRAS := $(shell sed -n 's/^. extras: *//p' $(STACK_FILE))
CHAIN_OPTIONS := $(shell sed -n 's/^. chain: *//p' $(STACK_FILE))
STACK_TESTS := $(shell sed -n 's/^. tests: *//p' $(STACK_FILE))
# Maven coordinates of the stack's Delta jars and of its S3A connector (hadoop-aws at pyspark's own
# Hadoop, and that release's AWS SDK bundle), cached in .jars/ (Maven's ~/.m2 keeps them too)
DELTA_ARTIFACTS := $(shell sed -n 's/^. delta-jars: *//p' $(STACK_FILE))
S3_ARTIFACTS := $(shell sed -n 's/^. s3-jars: *//p' $(STACK_FILE))
jar_of = .jars/$(word 2,$(subst :, ,$(1)))-$(word 3,$(subst :, ,$(1))).jar
DELTA_JARS := $(foreach a,$(DELTA_ARTIFACTS),$(call jar_of,$(a)))
S3_JARS := $(foreach a,$(S3_ARTIFACTS),$(call jar_of,$(a)))
STAMP := $(VENV)/.installed
comma := ,
space := $(subst ,, )
CLASS_ARCHIVE := .jars/driver-classes.jsa

.PHONY: help setup setup-s3 class-archive demo demo-full test test-cluster test-fast stack-env test-stack test-lines wheel lint bench bench-processes bench-pipeline bench-readers bench-fidelity clean

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

setup: $(STAMP) $(DELTA_JARS) ## Python env of STACK (default newest: .venv) and its Delta jars from Maven Central in .jars

$(STAMP): pyproject.toml $(STACK_FILE)
	@command -v $(PYTHON) >/dev/null || { echo "setup: $(PYTHON) not found (Python 3.11 or later is required)"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]' -c $(STACK_FILE)
	touch $(STAMP)

# Maven's own cache (~/.m2) keeps them, so later set-ups and runs need no network.
$(DELTA_JARS) $(S3_JARS):
	@command -v mvn >/dev/null || { echo "setup: mvn not found; install Maven or let Spark resolve Delta's jars"; exit 2; }
	mvn --batch-mode --quiet dependency:copy -Dartifact=$(strip $(foreach a,$(DELTA_ARTIFACTS) $(S3_ARTIFACTS),$(if $(filter $@,$(call jar_of,$(a))),$(a)))) -DoutputDirectory=.jars

setup-s3: setup $(S3_JARS) ## the object-store tests: moto's S3 server ([s3] extra) and Spark's S3A jars (560 MB)
	$(PY) -m pip install --quiet -e '.[$(EXTRAS),s3]' -c $(STACK_FILE)

class-archive: $(CLASS_ARCHIVE) ## the driver JVM's class-data archive (AppCDS) the tests' sessions map: each Spark start ~4 s quicker (one small run, about a minute)

# A speed-up of the test suite (tools/class_archive.py), mapped through the tests' Spark profile
# (tests/conftest.py). Rebuilt when the Python env or the jars change; a JDK that cannot write
# one only loses the speed.
$(CLASS_ARCHIVE): $(STAMP) $(DELTA_JARS)
	$(PY) tools/class_archive.py $@ || echo "class-archive: none built; Spark starts without it"

demo: setup ## the pipeline on the embedded default: five generated sources of 50,000 events, five models, the report (demo/)
	$(VENV)/bin/intent run --conf conf/demo.yaml

demo-full: setup ## the demo plus card transactions, KuaiRand all-signals, protocols, seeds, sensitivity, transfer (demo-full/)
	$(VENV)/bin/intent run --conf conf/full.yaml

test: setup $(CLASS_ARCHIVE) ## run the test suite (all but gpu-marked tests)
	$(PY) -m pytest

test-cluster: setup $(CLASS_ARCHIVE) ## spark-submit chain on a local standalone cluster, with a killed executor (about 11 min)
	$(PY) -m pytest -m cluster tests/pipeline/test_cluster.py

test-fast: setup ## the inner loop: every test that needs no JVM (no Spark), about 40 seconds
	$(PY) -m pytest -m 'not jvm and not gpu and not cluster'

WHEEL := dist/intent_spark-$(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)-py3-none-any.whl
wheel: $(WHEEL) ## the wheel a cluster installs (dist/): the package and its built-in confs, without Spark, Delta or torch

$(WHEEL): pyproject.toml $(shell git ls-files intent_spark models conf 2>/dev/null)
	rm -rf build $@
	$(PYTHON) -m pip wheel --quiet --no-deps -w dist .

# A fresh environment of the stack's exact set holding the wheel (not the checkout), outside the
# checkout; the short chain runs in a folder beside it, then the reader tests on that install.
STACKS_DIR := $(or $(TMPDIR),/tmp)/intent-spark-stacks
STACK_RUN ?= $(STACKS_DIR)/$(STACK)
STACK_ENV := $(STACK_RUN)/venv/.installed
stack-env: $(STACK_ENV) $(DELTA_JARS) ## a fresh environment of STACK's exact set holding the built wheel (outside the checkout)

$(STACK_ENV): $(STACK_FILE) | $(WHEEL)
	rm -rf $(STACK_RUN) && $(PYTHON) -m venv $(STACK_RUN)/venv
	$(STACK_RUN)/venv/bin/python -m pip install --quiet --upgrade pip
	$(STACK_RUN)/venv/bin/python -m pip install --quiet --no-compile '$(WHEEL)[$(EXTRAS)]' -c $(STACK_FILE)
	touch $@

test-stack: stack-env $(WHEEL) ## the short chain from the installed wheel on STACK (dbr-17.3, petastorm, spark-3.5), then the reader tests
	$(STACK_RUN)/venv/bin/python -m pip install --quiet --no-deps --force-reinstall $(WHEEL)
	rm -rf $(STACK_RUN)/chain && mkdir -p $(STACK_RUN)/chain
	cd $(STACK_RUN)/chain && ../venv/bin/python $(CURDIR)/tests/stack_chain.py --jars $(subst $(space),$(comma),$(abspath $(DELTA_JARS))) $(CHAIN_OPTIONS)
	cd $(STACK_RUN) && INTENT_JARS_DIR=$(CURDIR)/.jars venv/bin/python -m pytest -c /dev/null -p no:cacheprovider -q $(CURDIR)/tests/lake/test_readers.py $(CURDIR)/tests/train/test_reader_quality.py $(addprefix $(CURDIR)/,$(STACK_TESTS))

# Delta 3 (Spark 3.5) and Delta 4 write the same table protocol: each line's verify reads the
# other's chain lake (after `make test-stack` on spark-3.5 and dbr-17.3).
test-lines: setup ## a lake written on Spark 3.5 read on Spark 4, and one written on Spark 4 read on 3.5 (after test-stack)
	$(VENV)/bin/intent verify --lake $(STACKS_DIR)/spark-3.5/chain/lake
	$(STACKS_DIR)/spark-3.5/venv/bin/intent verify --lake $(STACKS_DIR)/dbr-17.3/chain/lake --spark-profile $(STACKS_DIR)/spark-3.5/chain/cluster.yaml

lint: setup ## ruff (check and format) on the code, tests and benchmarks; mypy on intent_spark and models
	$(VENV)/bin/ruff check intent_spark models jobs tests bench examples tools
	$(VENV)/bin/ruff format --check intent_spark models jobs tests bench examples tools
	$(VENV)/bin/mypy

BENCH_EVENTS ?= 5000000
SCALE_EVENTS ?= 1000000 5000000 20000000 50000000
bench: setup ## benchmarks, not tests (BENCHMARKS.md): ingest, split scaling vs DuckDB and RePlay (STACK=petastorm), models
	$(PY) -m pip install --quiet -e '.[$(EXTRAS),bench]' -c $(STACK_FILE)
	$(PY) -m pip install --quiet -e '.[$(EXTRAS),bench,replay]' -c $(STACK_FILE) 2>/dev/null \
	  || echo "make bench: RePlay 0.22 does not install beside the $(STACK) stack; the split scaling runs without it"
	$(PY) bench/ingest_bench.py --dataset rees46 --events $(BENCH_EVENTS)
	cd bench && ../$(PY) scale_bench.py --events $(SCALE_EVENTS) --out results/scale.json
	cd bench && ../$(PY) model_bench.py --out results/models.json --tracking-uri sqlite:///results/mlflow.db
	$(PY) bench/processes_bench.py --out bench/results/processes.json

bench-readers: setup ## rows/s of both readers on the same model-input files and SASRec steps/s through each (Petastorm in .venv-petastorm)
	$(PY) bench/readers_bench.py --events $(READER_EVENTS) --out bench/results/readers.json

bench-processes: setup ## SASRec training steps/s and scoring targets/s in 1 and 2 processes (TorchDistributor)
	$(PY) bench/processes_bench.py --out bench/results/processes.json

READER_EVENTS ?= 1000000 5000000
PIPELINE_EVENTS ?= 1000000 5000000 20000000 50000000
bench-pipeline: setup ## every stage at PIPELINE_EVENTS events against DuckDB, one run (sasrec on a fixed sample of users; BENCHMARKS.md)
	$(PY) -m pip install --quiet -e '.[$(EXTRAS),bench]' -c $(STACK_FILE)
	$(PY) bench/pipeline_bench.py --events $(PIPELINE_EVENTS) --out bench/results/pipeline.json

bench-fidelity: setup ## ours beside RecTools, RecBole and plain baselines on MovieLens-100K (each peer in its own bench/.venvs/)
	$(PY) bench/fidelity/fidelity_bench.py --out bench/results/fidelity.json
	mkdir -p docs/bench && cp bench/results/fidelity.json docs/bench/fidelity.json

clean: ## remove demo output and caches (keeps .venv and .jars)
	rm -rf demo demo-full spark-warehouse .pytest_cache build dist
