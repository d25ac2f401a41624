"""Conf-driven options: Parquet input, KuaiRand signal priority, re-ingest, conf errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from intent_spark.cli import main
from intent_spark.core import schema as S
from intent_spark.core.conf import from_mapping
from intent_spark.core.errors import ConfError
from intent_spark.core.sources import SourceConf, load_source
from intent_spark.ingest import ingest_source
from intent_spark.lake.context import Lake
from intent_spark.lake.tables import read_table

KUAI_HEADER = (
    "user_id,video_id,date,hourmin,time_ms,is_click,is_like,is_follow,is_comment,is_forward,"
    "is_hate,long_view,play_time_ms,duration_ms,profile_stay_time,comment_stay_time,"
    "is_profile_enter,is_rand,tab"
)


def _kuai_row(
    user, video, ms, click=0, like=0, follow=0, comment=0, forward=0, hate=0, long_view=0, profile=0
):
    return f"{user},{video},20220408,1500,{ms},{click},{like},{follow},{comment},{forward},{hate},{long_view},1,2,0,0,{profile},0,1"


KUAI_ROWS = [
    _kuai_row(1, 10, 1649412531925),  # no signal
    _kuai_row(1, 11, 1649412531926, click=1, long_view=1, like=1),  # like beats long_view and click
    _kuai_row(1, 12, 1649412531927, click=1, hate=1, forward=1),  # hate is first in the priority
    _kuai_row(2, 10, 1649412531928, click=1),
]


def _kuai_conf(per_signal: bool) -> SourceConf:
    conf = load_source("kuairand")
    action = conf.events.action.__class__(signals=conf.events.action.signals, per_signal=per_signal)
    return conf.__class__(
        **{**conf.__dict__, "events": conf.events.__class__(**{**conf.events.__dict__, "action": action})}
    )


@pytest.fixture
def kuai_raw(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "log_standard_4_08_to_4_21_27k_part1.csv").write_text(
        KUAI_HEADER + "\n" + "\n".join(KUAI_ROWS) + "\n"
    )
    return tmp_path


def test_kuairand_strongest_signal_per_impression(spark, kuai_raw, lake):
    ingest_source(Lake(spark, lake), _kuai_conf(per_signal=False), str(kuai_raw))
    rows = read_table(spark, lake, S.EVENTS, "kuairand").orderBy(S.SEQ).collect()
    assert [(r.item_id, r.event_type) for r in rows] == [
        ("10", "impression"),
        ("11", "like"),
        ("12", "hate"),
        ("10", "click"),
    ]
    assert rows[0].attributes == {"is_rand": "0", "tab": "1"}


def test_kuairand_one_event_per_signal_counts_each_line_once(spark, kuai_raw, lake):
    summary = ingest_source(Lake(spark, lake), _kuai_conf(per_signal=True), str(kuai_raw))
    rows = read_table(spark, lake, S.EVENTS, "kuairand").orderBy(S.SEQ).collect()
    assert [(r.item_id, r.event_type) for r in rows] == [
        ("10", "impression"),
        ("11", "like"),
        ("11", "long_view"),
        ("11", "click"),
        ("12", "hate"),
        ("12", "forward"),
        ("12", "click"),
        ("10", "click"),
    ]
    assert (summary.raw_rows, summary.events, summary.rejects) == (4, 8, 0)
    manifest = read_table(spark, lake, S.INGEST_FILES, "kuairand").first()
    assert (manifest.raw_rows, manifest.event_rows) == (4, 4)


def test_parquet_source_and_reingest_replaces_only_its_dataset(spark, tmp_path, lake):
    raw = tmp_path / "ledger"
    raw.mkdir()
    ledger = spark.createDataFrame(
        [
            ("c1", "m1", 1_600_000_000, 12.5),
            ("c1", "m2", 1_600_000_100, -3.0),
            ("c2", None, 1_600_000_200, 1.0),
        ],
        "customer string, merchant string, epoch long, amount double",
    )
    ledger.coalesce(1).write.parquet(str(raw / "part"))
    conf_path = tmp_path / "ledger.yaml"
    conf_path.write_text(
        "name: ledger\n"
        "events:\n"
        "  files: ['part/*.parquet']\n"
        "  format: parquet\n"
        "  columns: [customer, merchant, epoch, amount]\n"
        "  user: customer\n"
        "  item: merchant\n"
        "  time: {column: epoch, epoch: s}\n"
        "  action: {constant: payment}\n"
        "  amount: amount\n"
    )
    conf = load_source(conf_path)
    first = ingest_source(Lake(spark, lake), conf, str(raw))
    assert (first.events, first.rejects) == (2, 1)
    reject = read_table(spark, lake, S.REJECTS, "ledger").first()
    assert (reject.line, reject.field, reject.reason) == (3, "merchant", "missing item id")
    assert sorted(r.amount for r in read_table(spark, lake, S.EVENTS, "ledger").collect()) == [-3.0, 12.5]
    # A second dataset, then the first again: nothing doubles and the other is untouched.
    ingest_source(Lake(spark, lake), conf, str(raw), dataset="ledger_copy")
    ingest_source(Lake(spark, lake), conf, str(raw))
    counts = {
        r.dataset: r["count"] for r in read_table(spark, lake, S.EVENTS).groupBy(S.DATASET).count().collect()
    }
    assert counts == {"ledger": 2, "ledger_copy": 2}


def test_conf_errors_name_the_file_and_key(tmp_path):
    with pytest.raises(ConfError, match=r"x.yaml: events.usr: unknown key; did you mean 'user'\?"):
        from_mapping(SourceConf, {"name": "x", "events": {"usr": "a"}}, "x.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nevents: [unclosed\n")
    with pytest.raises(ConfError, match=r"bad.yaml:\d+: not valid YAML"):
        load_source(bad)
    with pytest.raises(ConfError, match="unknown dataset 'nope'; built-in: .*rees46"):
        load_source("nope")
    with pytest.raises(ConfError, match="exactly one of 'format' or 'epoch'"):
        from_mapping(
            SourceConf,
            {
                "name": "x",
                "events": {
                    "files": ["a"],
                    "user": "u",
                    "item": "i",
                    "time": {"column": "t"},
                    "action": {"constant": "c"},
                    "columns": ["u"],
                },
            },
            "x",
        )


@pytest.mark.jvm  # the later stages look for their tables in a Delta lake
def test_cli_unknown_dataset_and_later_stage(tmp_path, capsys):
    assert main(["ingest", "--dataset", "nope", "--raw", str(tmp_path), "--lake", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (
        "intent ingest: error: unknown dataset 'nope'; built-in: amazon_benchmark_csv, amazon_benchmark_split, "
        "amazon_hk, cct, hm, kuairand, microlens, movielens_100k, movielens_recbole_100k, rees46, yelp_reviews"
    )
    assert main(["train", "--dataset", "rees46", "--model", "bert4rec", "--lake", str(tmp_path)]) == 2
    error = capsys.readouterr().err.strip()  # then any plug-in installed here, then the hint
    assert error.startswith(
        "intent train: error: unknown model 'bert4rec' (registered: popularity, repeat_last, sasrec, "
        "sasrec_f, gru4rec, text_encoder"
    )
    assert error.endswith("; or give a module:Class spec)") and "\n" not in error
    assert main(["score", "--dataset", "rees46", "--model", "sasrec", "--lake", str(tmp_path / "lake")]) == 2
    assert "/checksums: no such table in the lake" in capsys.readouterr().err
    assert main(["report", "--lake", str(tmp_path), "--out", str(tmp_path / "report")]) == 2
    assert (
        "/metrics: no such table in the lake (run the stage that writes metrics first)"
        in capsys.readouterr().err
    )


def test_cli_generate_writes_release(tmp_path, capsys):
    assert (
        main(["generate", "--dataset", "rees46", "--events", "500", "--out", str(tmp_path), "--seed", "3"])
        == 0
    )
    assert (tmp_path / "2019-Oct.csv").exists()
    assert "500 event rows" in capsys.readouterr().err
    assert main(["generate", "--dataset", "nope", "--events", "500", "--out", str(tmp_path)]) == 2


def test_split_on_an_empty_lake_is_one_line_error(spark, tmp_path, capsys):
    assert main(["split", "--dataset", "rees46", "--lake", str(tmp_path / "lake")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"intent split: error: {tmp_path / 'lake'}: no events of rees46; ingest rees46 first (`intent ingest`)"
    ]
