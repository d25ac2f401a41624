"""Synthetic KuaiRand-27K release: impression logs with feedback signals, user and video features.

Why: KuaiRand is the source with several feedback signals per impression, a fixed population
of 27,285 users and a random-exposure log (`is_rand` = 1). Real layout: files under `data/`,
standard logs split by period and in two parts, one random log, integer `date` (yyyymmdd) and
`hourmin` in Beijing time next to the 13-digit `time_ms`, rows sorted by user then time (not
globally by time), and video tags as a quoted comma-separated list.
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from intent_spark.generate import GeneratedRelease
from intent_spark.generate.output import as_text, csv_bad_lines, join_lines
from intent_spark.generate.release import open_event_logs, release_of
from intent_spark.generate.world import (
    Activity,
    Catalogue,
    EventBlock,
    capped_user_count,
    iter_event_blocks,
    side_rng,
    source_catalogue,
    unix_ms,
)

DATASET = "kuairand"
DATA_FOLDER = "data"
STANDARD_EARLY = (
    "log_standard_4_08_to_4_21_27k_part1.csv",
    "log_standard_4_08_to_4_21_27k_part2.csv",
)
STANDARD_LATE = (
    "log_standard_4_22_to_5_08_27k_part1.csv",
    "log_standard_4_22_to_5_08_27k_part2.csv",
)
RANDOM_LOG = "log_random_4_22_to_5_08_27k.csv"
USER_FEATURES_FILE = "user_features_27k.csv"
VIDEO_FEATURES_FILE = "video_features_basic_27k.csv"
LOG_HEADER = (
    "user_id,video_id,date,hourmin,time_ms,is_click,is_like,is_follow,is_comment,is_forward,"
    "is_hate,long_view,play_time_ms,duration_ms,profile_stay_time,comment_stay_time,"
    "is_profile_enter,is_rand,tab"
)
USER_FEATURES_COLUMNS = (
    "user_id",
    "user_active_degree",
    "is_lowactive_period",
    "is_live_streamer",
    "is_video_author",
    "follow_user_num",
    "follow_user_num_range",
    "fans_user_num",
    "fans_user_num_range",
    "friend_user_num",
    "friend_user_num_range",
    "register_days",
    "register_days_range",
    *(f"onehot_feat{i}" for i in range(18)),
)
VIDEO_FEATURES_COLUMNS = (
    "video_id",
    "author_id",
    "video_type",
    "upload_dt",
    "upload_type",
    "visible_status",
    "video_duration",
    "server_width",
    "server_height",
    "music_id",
    "music_type",
    "tag",
)
USER_CAP = 27_285
BEIJING_MS = 8 * 3_600_000
LATE_PERIOD_START = 20220422
RANDOM_SHARE = 0.05
ACTIVITY = Activity(
    start_ms=unix_ms("2022-04-08T00:00:00") - BEIJING_MS,
    end_ms=unix_ms("2022-05-09T00:00:00") - BEIJING_MS,
    mean_events_per_user=40.0,
    max_events_per_user=2_000_000,
    session_continue=0.95,
    session_gap_ms=25_000.0,
    user_cap=USER_CAP,
)
ITEMS_FACTOR = 2.0
TAB_SHARES = np.array(
    [0.2, 0.45, 0.1, 0.05, 0.08, 0.02, 0.02, 0.02, 0.01, 0.01, 0.01, 0.01, 0.005, 0.005, 0.01]
)
UPLOAD_TYPES = (
    "ShortImport",
    "LongImport",
    "Web",
    "Kmovie",
    "PictureSet",
    "LongPicture",
    "LipsSync",
    "ShareFromOtherApp",
    "FollowShoot",
    "PhotoCopy",
)
SCREENS = ((720, 1280), (1080, 1920), (576, 1024), (1280, 720), (540, 960))
FOLLOW_BINS = (0, 1, 11, 51, 101, 151, 251, 501)
FOLLOW_RANGES = (
    "0",
    "(0,10]",
    "(10,50]",
    "(50,100]",
    "(100,150]",
    "(150,250]",
    "(250,500]",
    "500+",
)
FANS_BINS = (0, 1, 10, 100, 1_000, 5_000, 10_000, 100_000)
FANS_RANGES = (
    "0",
    "[1,10)",
    "[10,100)",
    "[100,1k)",
    "[1k,5k)",
    "[5k,1w)",
    "[1w,10w)",
    "[10w,100w)",
)
FRIEND_BINS = (0, 1, 5, 30, 60, 120, 250)
FRIEND_RANGES = ("0", "[1,5)", "[5,30)", "[30,60)", "[60,120)", "[120,250)", "250+")
REGISTER_BINS = (0, 31, 61, 91, 181, 366, 731)
REGISTER_RANGES = ("15-30", "31-60", "61-90", "91-180", "181-365", "366-730", "730+")


def activity_for(events: int) -> Activity:
    """Users are a fixed population: at large sizes each user gets more events."""
    return dataclasses.replace(ACTIVITY, mean_events_per_user=max(40.0, events / (0.8 * USER_CAP)))


def beijing_date_and_hour(time_ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`date` (yyyymmdd) and `hourmin` (HH00) of each instant in Beijing time."""
    local = (time_ms + BEIJING_MS).astype("datetime64[ms]")
    day = local.astype("datetime64[D]")
    month = day.astype("datetime64[M]")
    year = month.astype("datetime64[Y]").astype(np.int64) + 1970
    month_number = month.astype(np.int64) % 12 + 1
    day_number = (day - month).astype(np.int64) + 1
    hour = (local - day).astype("timedelta64[h]").astype(np.int64)
    return year * 10_000 + month_number * 100 + day_number, hour * 100


def signal_columns(block: EventBlock, duration_ms: np.ndarray) -> dict[str, np.ndarray]:
    """Feedback signals of each impression, with the real release's rough rates."""
    rng = block.rng
    n = block.n_events
    click = rng.random(n) < 0.35
    like = np.where(click, rng.random(n) < 0.05, rng.random(n) < 0.004)
    long_view = np.where(click, rng.random(n) < 0.45, rng.random(n) < 0.14)
    comment = rng.random(n) < 0.005
    profile_enter = rng.random(n) < 0.03
    played = np.where(long_view, rng.uniform(0.7, 1.6, n), rng.uniform(0.0, 0.5, n))
    return {
        "is_click": click,
        "is_like": like,
        "is_follow": rng.random(n) < 0.003,
        "is_comment": comment,
        "is_forward": rng.random(n) < 0.003,
        "is_hate": rng.random(n) < 0.001,
        "long_view": long_view,
        "play_time_ms": (duration_ms * played).astype(np.int64),
        "duration_ms": duration_ms,
        "profile_stay_time": np.where(profile_enter, rng.geometric(0.05, n), 0),
        "comment_stay_time": np.where(comment | (rng.random(n) < 0.03), rng.geometric(0.07, n), 0),
        "is_profile_enter": profile_enter,
    }


def write_video_features(
    path: Path,
    catalogue: Catalogue,
    video_id: np.ndarray,
    duration_ms: np.ndarray,
    rng: np.random.Generator,
) -> None:
    """One row per video: tags from its kind (so a new video shares tags with older ones)."""
    n_items = catalogue.n_items
    kind_tags = [
        sorted({int(t) for t in rng.integers(0, 69, int(rng.integers(1, 3)))})
        for _ in range(catalogue.n_kinds)
    ]
    author = rng.integers(0, max(2, n_items // 3), n_items)
    is_ad = rng.random(n_items) < 0.03
    start_day = np.datetime64("2022-04-08", "D")
    released_day = start_day + (catalogue.release * 31).astype("timedelta64[D]")
    old_day = start_day - rng.integers(1, 400, n_items).astype("timedelta64[D]")
    upload_day = np.where(catalogue.release > 0, released_day, old_day)
    upload_type = rng.choice(len(UPLOAD_TYPES), n_items, p=[0.6] + [0.4 / 9] * 9)
    screen = rng.integers(0, len(SCREENS), n_items)
    has_duration = rng.random(n_items) >= 0.05
    music_id = rng.integers(0, 5_000_000, n_items)
    music_type = rng.choice([4, 7, 8, 9, 11], n_items)
    extra_tag = np.where(rng.random(n_items) < 0.1, rng.integers(0, 69, n_items), -1)
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(VIDEO_FEATURES_COLUMNS)
        for item in np.argsort(video_id).tolist():
            tags = kind_tags[int(catalogue.item_kind[item])]
            if extra_tag[item] >= 0 and extra_tag[item] not in tags:
                tags = [*tags, int(extra_tag[item])]
            width, height = SCREENS[screen[item]]
            writer.writerow(
                (
                    int(video_id[item]),
                    int(author[item]),
                    "AD" if is_ad[item] else "NORMAL",
                    str(upload_day[item]),
                    UPLOAD_TYPES[upload_type[item]],
                    "public",
                    f"{float(duration_ms[item]):.1f}" if has_duration[item] else "",
                    width,
                    height,
                    int(music_id[item]),
                    int(music_type[item]),
                    ",".join(str(t) for t in tags),
                )
            )


def bucket_label(lower_bounds: tuple[int, ...], labels: tuple[str, ...], value: int | np.integer) -> str:
    """The release's range label of a count: the label of the last bucket starting at or below it."""
    return labels[int(np.searchsorted(lower_bounds, value, "right")) - 1]


def write_user_features(path: Path, user_counts: np.ndarray, rng: np.random.Generator) -> None:
    """One row per user: activity degree from the user's own event count, social ranges."""
    n_users = user_counts.shape[0]
    quantile = np.argsort(np.argsort(user_counts, kind="stable"), kind="stable") / max(1, n_users)
    degree = np.where(
        quantile > 0.55, "high_active", np.where(quantile > 0.25, "full_active", "middle_active")
    )
    degree = np.where(rng.random(n_users) < 0.02, "UNKNOWN", degree)
    follow = np.floor(rng.lognormal(3.0, 1.5, n_users)).astype(np.int64)
    fans = np.floor(rng.lognormal(1.5, 2.0, n_users)).astype(np.int64)
    friends = np.floor(rng.lognormal(1.0, 1.5, n_users)).astype(np.int64)
    register = np.asarray(rng.integers(15, 2_000, size=n_users))
    onehot_cardinality = rng.integers(2, 60, 18)
    onehot: np.ndarray = rng.integers(0, onehot_cardinality, (n_users, 18))
    onehot_missing = rng.random((n_users, 18)) < 0.002
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(USER_FEATURES_COLUMNS)
        for user in range(n_users):
            writer.writerow(
                (
                    user,
                    str(degree[user]),
                    int(rng.random() < 0.03),
                    int(rng.random() < 0.05),
                    int(rng.random() < 0.3),
                    int(follow[user]),
                    bucket_label(FOLLOW_BINS, FOLLOW_RANGES, follow[user]),
                    int(fans[user]),
                    bucket_label(FANS_BINS, FANS_RANGES, fans[user]),
                    int(friends[user]),
                    bucket_label(FRIEND_BINS, FRIEND_RANGES, friends[user]),
                    int(register[user]),
                    bucket_label(REGISTER_BINS, REGISTER_RANGES, register[user]),
                    *("" if onehot_missing[user, k] else int(onehot[user, k]) for k in range(18)),
                )
            )


def make_bad_lines(template: str) -> list[bytes]:
    """Eight bad rows: short row, two bad times, no user, no video, non-numeric signal,
    bad bytes, header."""
    return csv_bad_lines(
        template,
        LOG_HEADER,
        replacements=[(4, "not-a-date"), (4, "2022-04-08T12:00:00"), (0, ""), (1, ""), (5, "abc")],
        encoding_field=4,
    )


def generate(
    out_dir: Path,
    events: int,
    seed: int,
    dirty: bool,
    progress: Callable[[str], None] | None,
) -> GeneratedRelease:
    """Write the five logs (streamed, by user then time), user and video features."""
    activity = activity_for(events)
    catalogue = source_catalogue(DATASET, events, seed, ITEMS_FACTOR)
    item_rng = side_rng(DATASET, seed, 1)
    video_id = item_rng.permutation(catalogue.n_items)
    duration_ms = np.clip(np.exp(item_rng.normal(9.8, 0.8, catalogue.n_items)), 2_000, 600_000)
    duration_ms = duration_ms.astype(np.int64)
    n_users = capped_user_count(events, activity) or 1
    part_two_first_user = (n_users + 1) // 2
    folder = out_dir / DATA_FOLDER
    fallback = f"0,{video_id[0]},20220408,800,{ACTIVITY.start_ms},0,0,0,0,0,0,0,1,1,0,0,0,0,1"
    log_paths = [folder / name for name in (*STANDARD_EARLY, *STANDARD_LATE, RANDOM_LOG)]
    bad_lines = make_bad_lines if dirty else None
    user_counts: list[np.ndarray] = []
    with open_event_logs(DATASET, seed, log_paths, LOG_HEADER, bad_lines, fallback) as logs:
        for block in iter_event_blocks(DATASET, catalogue, activity, events, seed, progress=progress):
            date, hourmin = beijing_date_and_hour(block.time_ms)
            late = date >= LATE_PERIOD_START
            is_rand = late & (block.rng.random(block.n_events) < RANDOM_SHARE * 2)
            time_fraction = (block.time_ms - activity.start_ms) / activity.range_ms
            random_pick = catalogue.sample_released_uniformly(time_fraction, block.rng.random(block.n_events))
            item = np.where(is_rand, random_pick, block.item)
            signals = signal_columns(block, duration_ms[item])
            tab = block.rng.choice(len(TAB_SHARES), block.n_events, p=TAB_SHARES / TAB_SHARES.sum())
            lines = join_lines(
                [
                    as_text(block.user),
                    as_text(video_id[item]),
                    as_text(date),
                    as_text(hourmin),
                    as_text(block.time_ms),
                    *(as_text(np.asarray(values).astype(np.int64)) for values in signals.values()),
                    as_text(is_rand.astype(np.int64)),
                    as_text(tab),
                ]
            )
            part_two = block.user >= part_two_first_user
            masks = (
                ~late & ~part_two,
                ~late & part_two,
                late & ~is_rand & ~part_two,
                late & ~is_rand & part_two,
                is_rand,
            )
            for log, mask in zip(logs, masks, strict=True):
                log.write(lines.filter(pa.array(mask)))
            user_counts.append(block.user_counts)
    user_path = folder / USER_FEATURES_FILE
    video_path = folder / VIDEO_FEATURES_FILE
    write_user_features(user_path, np.concatenate(user_counts), side_rng(DATASET, seed, 4))
    write_video_features(video_path, catalogue, video_id, duration_ms, side_rng(DATASET, seed, 5))
    return release_of(DATASET, out_dir, (*log_paths, user_path, video_path), logs)
