"""Progress of long Spark stages: tasks done of all, elapsed and an estimate, from the
scheduler's counts while the job runs."""

from __future__ import annotations

import re
import time

from intent_spark.lake.progress import spark_progress


def test_a_running_job_reports_its_tasks_and_an_estimate(spark):
    lines: list[str] = []
    slow = spark.sparkContext.parallelize(range(8), 8).map(lambda x: time.sleep(0.4) or x)
    with spark_progress(spark, lines.append, "toy split", every=0.25):
        assert slow.count() == 8
    during = [line for line in lines if "Spark stage" in line]
    assert during, lines
    counts = [re.search(r"toy split: Spark stage \d+: (\d)/8 tasks, \d+s elapsed", line) for line in during]
    assert all(counts), during
    done = [int(found.group(1)) for found in counts]
    assert done == sorted(done) and done[-1] >= 2  # 2 cores, 8 tasks of 0.4 s: 1.6 s of work
    assert any(re.search(r"about \d+s left", line) for line in during), during


def test_a_short_block_says_nothing(spark):
    lines: list[str] = []
    with spark_progress(spark, lines.append, "quick", every=30):
        spark.range(10).count()
    assert lines == []
