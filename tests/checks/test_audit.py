"""Admission audit: the paper's five criteria on hand-built events (numbers worked out by hand),
on every generated source and on a generated card-transaction release, and through the CLI."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime

import pytest
import yaml
from PIL import Image

from intent_spark.checks.audit import (
    ACCESS,
    ACTION,
    ADMIT,
    CALENDAR,
    COLUMNS,
    CRITERIA,
    POPULATION,
    REJECT,
    STABLE,
    audit_dataset,
    audit_measures,
    audit_verdicts,
    write_audit,
)
from intent_spark.cli import main
from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.core.sources import (
    ActionOverride,
    ActionSpec,
    EventsSpec,
    SourceConf,
    TimeSpec,
    load_source,
)
from intent_spark.generate import SOURCES, generate_release
from intent_spark.ingest import ingest_source
from intent_spark.lake.context import Lake
from intent_spark.lake.tables import write_dataset
from intent_spark.report.audit import audit_sections

CONF = SourceConf(
    name="hand",
    events=EventsSpec(
        files=("ledger.csv",),
        columns=("customer", "shop", "when"),
        user="customer",
        item="shop",
        time=TimeSpec(column="when", format="yyyy-MM-dd HH:mm"),
        action=ActionSpec(constant="purchase"),
    ),
    release="hand-built ledger.csv",
    terms="CC0",
)


def _event(user: str, day: int, hour: int, minute: int, seq: int, kind: str = "purchase") -> tuple:
    return (
        "x",
        user,
        f"shop{seq % 4}",
        datetime(2024, 1, day, hour, minute),
        seq << S.SUB_BITS,
        kind,
        1.0,
        {},
    )


def admissible_rows() -> list[tuple]:
    """30 users 1000..1029; user i has 3 + i % 3 events (10 users each of 3, 4, 5: 120 events),
    event k on day 1 + k at 09:(1 + 2i): minutes nonzero, seconds zero, no two alike per user.
    User 1000 is written newest first in the raw file: of the 120 - 30 = 90 consecutive pairs,
    its 2 go back in time in raw-file order (2/90); in (ts, seq) order none tie."""
    rows = []
    for i in range(30):
        n = 3 + i % 3
        for k in range(n):
            seq = i * 10 + (n - 1 - k if i == 0 else k)
            rows.append(_event(str(1000 + i), 1 + k, 9, 1 + 2 * i, seq))
    return rows


def date_only_rows() -> list[tuple]:
    """Midnight dates only. a: 01-01 x5 then 01-02 (5 pairs, 4 tied); b: 01-01 x3 (2 pairs, both
    tied); c: 01-05 x4 (3 pairs, all tied); d: one event. 9 of 10 pairs tie (90.0%)."""
    days = {"a": [1, 1, 1, 1, 1, 2], "b": [1, 1, 1], "c": [5, 5, 5, 5], "d": [3]}
    rows, seq = [], 0
    for user, dates in days.items():
        for day in dates:
            rows.append(_event(user, day, 0, 0, seq))
            seq += 1
    return rows


def mystery_rows() -> list[tuple]:
    """The admissible rows with 3 events retyped 'mystery', which a constant action never writes."""
    return [r[:5] + ("mystery",) + r[6:] if i in (0, 40, 80) else r for i, r in enumerate(admissible_rows())]


@pytest.fixture(scope="module")
def hand_lake(spark, tmp_path_factory) -> str:
    lake = str(tmp_path_factory.mktemp("lake_audit"))
    for dataset, rows in (("good", admissible_rows()), ("dates", date_only_rows()), ("odd", mystery_rows())):
        frame = spark.createDataFrame([(dataset, *r[1:]) for r in rows], S.EVENTS_SCHEMA).repartition(3)
        write_dataset(frame, lake, S.EVENTS, dataset)
    return lake


def _verdicts(table) -> dict[str, tuple[str, str]]:
    assert tuple(table.columns) == COLUMNS and tuple(table["criterion"]) == CRITERIA
    return {r.criterion: (r.verdict, r.reason) for r in table.itertuples()}


def test_admissible_dataset_passes_every_criterion_with_hand_numbers(spark, hand_lake):
    from intent_spark.lake.tables import read_table

    measures = audit_measures(read_table(spark, hand_lake, S.EVENTS, "good"))
    assert measures["users"] == 30 and measures["events"] == 120
    assert measures["sequence_users"] == 30 and measures["single_share"] == 0.0
    assert measures["resolution"] == "minute"
    assert (measures["second_share"], measures["minute_share"], measures["hour_share"]) == (0.0, 1.0, 1.0)
    assert measures["tie_share"] == 0.0 and measures["midnight_share"] == 0.0
    assert measures["backwards_share"] == pytest.approx(2 / 90)
    assert measures["id_format"] == "digits"
    assert measures["event_types"] == {"purchase": 120}

    verdicts = _verdicts(
        audit_dataset(Lake(spark, hand_lake), DatasetRef("good"), CONF, min_sequence_users=20)
    )
    assert verdicts == {c: (ADMIT, "") for c in CRITERIA}


def test_too_few_users_fail_the_default_floor(spark, hand_lake):
    verdicts = _verdicts(audit_dataset(Lake(spark, hand_lake), DatasetRef("good"), CONF))
    assert verdicts[POPULATION] == (REJECT, "30 users have 3+ events, below the floor of 25,000")
    assert {c for c, (v, _) in verdicts.items() if v == REJECT} == {POPULATION}


def test_date_only_ties_fail_calendar_timestamps(spark, hand_lake):
    table = audit_dataset(Lake(spark, hand_lake), DatasetRef("dates"), CONF, min_sequence_users=2)
    verdicts = _verdicts(table)
    verdict, reason = verdicts[CALENDAR]
    assert verdict == REJECT and "date-only" in reason and "90.0%" in reason
    measured = table.set_index("criterion").loc[CALENDAR, "measured"]
    assert (
        "resolution day" in measured
        and "at midnight 100.0%" in measured
        and "dates that look noised" in measured
    )
    # 4 users, d alone has one event (25%); a, b and c have 3+ events: 3 >= floor 2.
    assert verdicts[STABLE] == (ADMIT, "") and verdicts[POPULATION] == (ADMIT, "")


def test_ties_are_judged_only_on_date_only_timestamps(spark, hand_lake):
    from intent_spark.lake.tables import read_table

    measures = audit_measures(read_table(spark, hand_lake, S.EVENTS, "dates"))
    assert measures["tie_share"] == pytest.approx(9 / 10) and measures["resolution"] == "day"
    assert measures["users"] == 4 and measures["single_share"] == 0.25 and measures["sequence_users"] == 3
    timed = {**measures, "resolution": "hour"}  # the same ties at hour resolution: a real tie, kept
    assert _verdicts(audit_verdicts(timed, CONF, min_sequence_users=2))[CALENDAR] == (ADMIT, "")
    lonely = {**measures, "single_share": 0.75, "users": 4}
    verdict, reason = _verdicts(audit_verdicts(lonely, CONF, min_sequence_users=2))[STABLE]
    assert verdict == REJECT and "75.0% of 4 users have a single event" in reason


def test_unmapped_event_type_fails_action_mapping(spark, hand_lake):
    verdicts = _verdicts(
        audit_dataset(Lake(spark, hand_lake), DatasetRef("odd"), CONF, min_sequence_users=20)
    )
    verdict, reason = verdicts[ACTION]
    assert verdict == REJECT and "'mystery' (3 events)" in reason and "writes purchase" in reason
    # An override type and a column action map it; an override with no field does not.
    measures = {**_good_measures(), "event_types": {"purchase": 117, "mystery": 3}}
    overridden = ActionSpec(
        constant="purchase", overrides=(ActionOverride(type="mystery", present="Errors?"),)
    )
    for action in (overridden, ActionSpec(column="kind")):
        conf = replace(CONF, events=replace(CONF.events, action=action))
        assert _verdicts(audit_verdicts(measures, conf, min_sequence_users=20))[ACTION] == (ADMIT, "")
    blank = ActionSpec(constant="purchase", overrides=(ActionOverride(type="mystery", present=" "),))
    conf = replace(CONF, events=replace(CONF.events, action=blank))
    assert _verdicts(audit_verdicts(measures, conf, min_sequence_users=20))[ACTION] == (
        REJECT,
        "override(s) mystery name no source field",
    )


def _good_measures() -> dict:
    return {
        "events": 120,
        "users": 30,
        "single_users": 0,
        "single_share": 0.0,
        "sequence_users": 30,
        "second_share": 0.0,
        "minute_share": 1.0,
        "hour_share": 1.0,
        "resolution": "minute",
        "midnight_share": 0.0,
        "tie_share": 0.0,
        "backwards_share": 2 / 90,
        "digit_id_share": 1.0,
        "hex_id_share": 0.0,
        "id_format": "digits",
        "event_types": {"purchase": 120},
    }


def test_missing_terms_or_user_field_reject(spark, hand_lake):
    verdicts = _verdicts(
        audit_dataset(
            Lake(spark, hand_lake), DatasetRef("good"), replace(CONF, terms=""), min_sequence_users=20
        )
    )
    assert verdicts[ACCESS] == (REJECT, "the conf gives no terms")
    both = _verdicts(audit_verdicts(_good_measures(), replace(CONF, terms=" ", release=""), 20))
    assert both[ACCESS] == (REJECT, "the conf gives no release and no terms")
    nobody = replace(CONF, events=replace(CONF.events, user=""))
    assert _verdicts(audit_verdicts(_good_measures(), nobody, 20))[STABLE] == (
        REJECT,
        "the conf names no user field",
    )


def test_write_audit_and_report_section(spark, hand_lake):
    path = write_audit(Lake(spark, hand_lake), DatasetRef("dates"), CONF, min_sequence_users=2)
    assert path.name == "dates.csv" and path.parent.name == "audit"
    figure = path.with_suffix(".png")
    labels = json.loads(Image.open(figure).info["intent.axes"])
    assert len(labels) == 2 and all(x and y for x, y in labels)
    [section] = audit_sections(Lake(spark, hand_lake))
    assert section.title == "dates: admission audit" and section.figure == figure
    assert section.table.loc[CALENDAR, "verdict"] == REJECT and section.table.loc[ACCESS, "reason"] == ""
    assert "rejected on calendar timestamps" in section.note


# Generated H&M draws purchase baskets on one date, as the real release does: 69.9% of a user's
# consecutive purchases share a date, under the 80% the rule allows (the paper admits H&M).


def _rejected(table) -> dict[str, str]:
    return {c: reason for c, (v, reason) in _verdicts(table).items() if v == REJECT}


@pytest.mark.slow
@pytest.mark.parametrize("name", SOURCES)
def test_generated_sources_pass_every_criterion(spark, generated_lake, name):
    lake, _, _ = generated_lake
    table = audit_dataset(Lake(spark, lake), DatasetRef(name), load_source(name), min_sequence_users=100)
    assert _rejected(table) == {}


@pytest.mark.slow
def test_generated_card_transactions(spark, tmp_path):
    """3,000 generated transactions hold about 50 card holders (60 events each; TabFormer has about
    2,000 holders in 24M rows, under the paper's 25,000 floor): a floor of 40 admits every
    criterion, one of 100 rejects the population alone."""
    raw, lake = tmp_path / "raw", str(tmp_path / "lake")
    generate_release("cct", raw, 3000, seed=2)
    ingest_source(Lake(spark, lake), load_source("cct"), str(raw))
    assert (
        _rejected(
            audit_dataset(Lake(spark, lake), DatasetRef("cct"), load_source("cct"), min_sequence_users=40)
        )
        == {}
    )
    table = audit_dataset(Lake(spark, lake), DatasetRef("cct"), load_source("cct"), min_sequence_users=100)
    rejected = _rejected(table)
    assert set(rejected) == {POPULATION}
    assert rejected[POPULATION].endswith("users have 3+ events, below the floor of 100")
    measured = table.set_index("criterion")["measured"]
    assert "resolution minute" in measured[CALENDAR]  # Year Month Day HH:MM
    assert "purchase" in measured[ACTION]


def test_cli_exit_status_and_lines(spark, hand_lake, tmp_path, capsys):
    conf = tmp_path / "hand.yaml"
    events = {
        "files": ["ledger.csv"],
        "columns": ["customer", "shop", "when"],
        "user": "customer",
        "item": "shop",
        "time": {"column": "when", "format": "yyyy-MM-dd HH:mm"},
        "action": {"constant": "purchase"},
    }
    conf.write_text(yaml.safe_dump({"name": "hand", "events": events, "release": "r", "terms": "t"}))
    out = tmp_path / "audit"
    args = ["audit", "--lake", hand_lake, "--conf", str(conf), "--out", str(out)]
    assert main([*args, "--dataset", "good"]) == 1  # 30 users against the default 25,000 floor
    err = capsys.readouterr().err
    assert "reject sequence population: 30 users have 3+ events" in err
    assert "admit access" in err and "rejected on: sequence population" in err
    assert (out / "good.csv").exists() and (out / "good.png").exists()
    assert main([*args, "--dataset", "good", "--sequence-users", "20"]) == 0
    assert main([*args, "--dataset", "missing"]) == 2
    assert "holds no events of 'missing'" in capsys.readouterr().err
    assert main([*args, "--dataset", "good", "--floor-users", "20"]) == 2  # the cells' floor, not the audit's
    assert "the audit's is `--sequence-users 20`" in capsys.readouterr().err
