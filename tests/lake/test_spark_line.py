"""The one place the Spark lines differ: each stack's Delta jars are the build for its Spark."""

from __future__ import annotations

import re

import pytest
from conftest import STACKS, pinned_versions

from intent_spark.lake.spark_line import delta_artifact, line_of


def test_delta_builds_by_line_worked_by_hand():
    assert delta_artifact("3.3.3", "3.5.9") == "io.delta:delta-spark_2.12:3.3.3"
    assert delta_artifact("4.0.1", "4.0.1") == "io.delta:delta-spark_2.13:4.0.1"
    assert delta_artifact("4.4.0", "4.2.0") == "io.delta:delta-spark_4.2_2.13:4.4.0"
    assert line_of("3.5.9") == (3, 5) and line_of("4.2.0.dev1") == (4, 2)


@pytest.mark.parametrize("stack", sorted(STACKS.glob("*.txt")), ids=lambda path: path.stem)
def test_each_stack_caches_the_delta_build_of_its_own_spark(stack):
    pins = pinned_versions(stack)
    (jars,) = re.findall(r"(?m)^# delta-jars: (.+)$", stack.read_text(encoding="utf-8"))
    assert delta_artifact(pins["delta-spark"], pins["pyspark"]) in jars.split()
