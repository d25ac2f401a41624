"""The dataset lock on a filesystem that refuses hard links: an exclusive create instead."""

from __future__ import annotations

import errno
import json
import os

import pytest

from intent_spark.core.datasets import parse_dataset
from intent_spark.core.errors import IntentError
from intent_spark.lake.locks import dataset_lock


@pytest.fixture
def no_hard_links(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", refuse)


def test_a_lake_without_hard_links_takes_and_frees_the_lock(no_hard_links, tmp_path):
    lake = str(tmp_path / "lake")
    with dataset_lock(lake, [parse_dataset("hm.seed1")], "intent split --dataset hm.seed1"):
        held = json.loads((tmp_path / "lake" / "_locks" / "hm.json").read_text())
        assert held["pid"] == os.getpid() and held["command"] == "intent split --dataset hm.seed1"
        assert sorted(p.name for p in (tmp_path / "lake" / "_locks").iterdir()) == ["hm.json"]
    assert list((tmp_path / "lake" / "_locks").iterdir()) == []


def test_a_lake_without_hard_links_refuses_a_second_writer(no_hard_links, tmp_path):
    lake = str(tmp_path / "lake")
    with dataset_lock(lake, [parse_dataset("hm")], "intent split --dataset hm"):
        second = dataset_lock(lake, [parse_dataset("hm")], "intent ingest --dataset hm")
        with pytest.raises(IntentError, match=r"hm is being written by `intent split --dataset hm` \(pid"):
            second.__enter__()
        assert json.loads((tmp_path / "lake" / "_locks" / "hm.json").read_text())["command"] == (
            "intent split --dataset hm"
        )


def test_a_dead_holders_lock_is_taken_over_without_hard_links(no_hard_links, tmp_path):
    locks = tmp_path / "lake" / "_locks"
    locks.mkdir(parents=True)
    gone = {"command": "intent split --dataset hm", "pid": 2**22 + 7, "host": os.uname().nodename}
    (locks / "hm.json").write_text(json.dumps(gone))
    seen = []
    with dataset_lock(
        str(tmp_path / "lake"), [parse_dataset("hm")], "intent split --dataset hm --seed 2", seen.append
    ):
        assert json.loads((locks / "hm.json").read_text())["pid"] == os.getpid()
    assert len(seen) == 1 and "which is gone" in seen[0]
