# intent-spark: `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
DELTA_VERSION := 4.0.1
DELTA_JARS := .jars/delta-spark_2.13-$(DELTA_VERSION).jar .jars/delta-storage-$(DELTA_VERSION).jar
STAMP := $(VENV)/.installed
# Spark 4.0.1's own Hadoop (pyspark/jars/hadoop-client-api-3.4.1.jar) and hadoop-aws 3.4.1's AWS SDK
HADOOP_VERSION := 3.4.1
AWS_SDK_VERSION := 2.24.6
S3_JARS := .jars/hadoop-aws-$(HADOOP_VERSION).jar .jars/bundle-$(AWS_SDK_VERSION).jar
CLASS_ARCHIVE := .jars/driver-classes.jsa

.PHONY: help setup setup-s3 class-archive demo demo-full test test-cluster test-fast lint bench bench-processes bench-pipeline bench-fidelity clean

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

setup: $(STAMP) $(DELTA_JARS) ## Python env in .venv (pinned) and Delta jars from Maven Central in .jars

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "setup: $(PYTHON) not found (Python 3.11 is required)"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]' -c constraints.txt
	touch $(STAMP)

# Maven's own cache (~/.m2) keeps them, so later set-ups and runs need no network.
.jars/%-$(DELTA_VERSION).jar:
	@command -v mvn >/dev/null || { echo "setup: mvn not found; install Maven or let Spark resolve io.delta:delta-spark_2.13:$(DELTA_VERSION)"; exit 2; }
	mvn --batch-mode --quiet dependency:copy -Dartifact=io.delta:$*:$(DELTA_VERSION) -DoutputDirectory=.jars

setup-s3: setup $(S3_JARS) ## the object-store tests: moto's S3 server ([s3] extra) and Spark's S3A jars (560 MB)
	$(PY) -m pip install --quiet -e '.[dev,s3]' -c constraints.txt

.jars/hadoop-aws-$(HADOOP_VERSION).jar:
	mvn --batch-mode --quiet dependency:copy -Dartifact=org.apache.hadoop:hadoop-aws:$(HADOOP_VERSION) -DoutputDirectory=.jars

.jars/bundle-$(AWS_SDK_VERSION).jar:
	mvn --batch-mode --quiet dependency:copy -Dartifact=software.amazon.awssdk:bundle:$(AWS_SDK_VERSION) -DoutputDirectory=.jars

class-archive: $(CLASS_ARCHIVE) ## the driver JVM's class-data archive (AppCDS): each Spark start ~4 s quicker (one small run, about a minute)

# Rebuilt when the Python env or the jars change; a JDK that cannot write one only loses the speed.
$(CLASS_ARCHIVE): $(STAMP) $(DELTA_JARS)
	$(PY) -m intent_spark.pipeline.class_archive $@ || echo "class-archive: none built; Spark starts without it"

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

lint: setup ## ruff (check and format) on the code, tests and benchmarks; mypy on intent_spark and models
	$(VENV)/bin/ruff check intent_spark models jobs tests bench examples
	$(VENV)/bin/ruff format --check intent_spark models jobs tests bench examples
	$(VENV)/bin/mypy

BENCH_EVENTS ?= 5000000
SCALE_EVENTS ?= 1000000 5000000 20000000 50000000
bench: setup ## benchmarks, not tests (BENCHMARKS.md): ingest, split scaling vs DuckDB and RePlay, models
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) bench/ingest_bench.py --dataset rees46 --events $(BENCH_EVENTS)
	cd bench && ../$(PY) scale_bench.py --events $(SCALE_EVENTS) --out results/scale.json
	cd bench && ../$(PY) model_bench.py --out results/models.json --tracking-uri sqlite:///results/mlflow.db
	$(PY) bench/processes_bench.py --out bench/results/processes.json

bench-processes: setup ## SASRec training steps/s and scoring targets/s in 1 and 2 processes (TorchDistributor)
	$(PY) bench/processes_bench.py --out bench/results/processes.json

PIPELINE_EVENTS ?= 1000000 5000000 20000000 50000000
bench-pipeline: setup ## every stage at PIPELINE_EVENTS events against DuckDB, one run (sasrec on a fixed sample of users; BENCHMARKS.md)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) bench/pipeline_bench.py --events $(PIPELINE_EVENTS) --out bench/results/pipeline.json

bench-fidelity: setup ## ours beside RecTools, RecBole and plain baselines on MovieLens-100K (each peer in its own bench/.venvs/)
	$(PY) bench/fidelity/fidelity_bench.py --out bench/results/fidelity.json
	mkdir -p docs/bench && cp bench/results/fidelity.json docs/bench/fidelity.json

clean: ## remove demo output and caches (keeps .venv and .jars)
	rm -rf demo demo-full spark-warehouse .pytest_cache
