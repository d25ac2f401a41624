"""Synthetic raw releases: real formats, exact sizes, determinism and the planted structure."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import REPO_ROOT

from intent_spark.generate import SOURCES, GeneratedRelease, generate_release, microlens, rees46
from intent_spark.generate.world import source_catalogue

REAL_SAMPLES = REPO_ROOT.parent / "shared" / "data" / "real"
SMALL = 2_000
PATTERN_SIZE = 20_000

REES46_HEADER = "event_time,event_type,product_id,category_id,category_code,brand,price,user_id,user_session"
KUAIRAND_LOG_HEADER = (
    "user_id,video_id,date,hourmin,time_ms,is_click,is_like,is_follow,is_comment,is_forward,"
    "is_hate,long_view,play_time_ms,duration_ms,profile_stay_time,comment_stay_time,"
    "is_profile_enter,is_rand,tab"
)
CSV_HEADERS: dict[str, dict[str, str]] = {
    "rees46": {name: REES46_HEADER for name in rees46.MONTH_FILES},
    "hm": {
        "transactions_train.csv": "t_dat,customer_id,article_id,price,sales_channel_id",
        "customers.csv": ("customer_id,FN,Active,club_member_status,fashion_news_frequency,age,postal_code"),
        "articles.csv": (
            "article_id,product_code,prod_name,product_type_no,product_type_name,"
            "product_group_name,graphical_appearance_no,graphical_appearance_name,"
            "colour_group_code,colour_group_name,perceived_colour_value_id,"
            "perceived_colour_value_name,perceived_colour_master_id,perceived_colour_master_name,"
            "department_no,department_name,index_code,index_name,index_group_no,index_group_name,"
            "section_no,section_name,garment_group_no,garment_group_name,detail_desc"
        ),
    },
    "kuairand": {
        "data/log_standard_4_08_to_4_21_27k_part1.csv": KUAIRAND_LOG_HEADER,
        "data/log_standard_4_08_to_4_21_27k_part2.csv": KUAIRAND_LOG_HEADER,
        "data/log_standard_4_22_to_5_08_27k_part1.csv": KUAIRAND_LOG_HEADER,
        "data/log_standard_4_22_to_5_08_27k_part2.csv": KUAIRAND_LOG_HEADER,
        "data/log_random_4_22_to_5_08_27k.csv": KUAIRAND_LOG_HEADER,
        "data/user_features_27k.csv": (
            "user_id,user_active_degree,is_lowactive_period,is_live_streamer,is_video_author,"
            "follow_user_num,follow_user_num_range,fans_user_num,fans_user_num_range,"
            "friend_user_num,friend_user_num_range,register_days,register_days_range,"
            + ",".join(f"onehot_feat{i}" for i in range(18))
        ),
        "data/video_features_basic_27k.csv": (
            "video_id,author_id,video_type,upload_dt,upload_type,visible_status,video_duration,"
            "server_width,server_height,music_id,music_type,tag"
        ),
    },
    "microlens": {
        "MicroLens-1M_pairs.csv": "user,item,timestamp",
        "MicroLens-1M_titles.csv": "item,title",
    },
}
REVIEW_KEYS = [
    "rating",
    "title",
    "text",
    "images",
    "asin",
    "parent_asin",
    "user_id",
    "timestamp",
    "helpful_vote",
    "verified_purchase",
]
META_KEYS = [
    "main_category",
    "title",
    "average_rating",
    "rating_number",
    "features",
    "description",
    "price",
    "images",
    "videos",
    "store",
    "categories",
    "details",
    "parent_asin",
    "bought_together",
]


def _ms(text: str) -> int:
    return int(pd.Timestamp(text, tz="UTC").value // 1_000_000)


@pytest.fixture(scope="module")
def small_releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, GeneratedRelease]:
    """One clean release per source, SMALL events, seed 7."""
    root = tmp_path_factory.mktemp("small")
    return {name: generate_release(name, root / name, SMALL, seed=7) for name in SOURCES}


@pytest.fixture(scope="module")
def microlens_pattern(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    """MicroLens pairs at PATTERN_SIZE events, in file order (grouped by user, time order)."""
    release = generate_release("microlens", tmp_path_factory.mktemp("ml"), PATTERN_SIZE, seed=3)
    return pd.read_csv(release.root / microlens.PAIRS_FILE)


def _file_bytes(release: GeneratedRelease) -> dict[str, bytes]:
    return {str(path.relative_to(release.root)): path.read_bytes() for path in release.files}


@pytest.mark.parametrize("dataset", SOURCES)
def test_same_seed_gives_identical_bytes_and_another_seed_differs(dataset: str, tmp_path: Path) -> None:
    first = generate_release(dataset, tmp_path / "a", SMALL, seed=11)
    second = generate_release(dataset, tmp_path / "b", SMALL, seed=11)
    other = generate_release(dataset, tmp_path / "c", SMALL, seed=12)
    assert _file_bytes(first) == _file_bytes(second)
    assert first.event_rows == second.event_rows
    event_logs = [name for name in _file_bytes(first) if Path(name).name in first.event_rows]
    assert any(_file_bytes(first)[n] != _file_bytes(other)[n] for n in event_logs)


@pytest.mark.parametrize("dataset", SOURCES)
def test_event_rows_sum_to_the_requested_events(
    dataset: str, small_releases: dict[str, GeneratedRelease]
) -> None:
    release = small_releases[dataset]
    assert sum(release.event_rows.values()) == SMALL
    assert set(release.bad_rows.values()) == {0}
    for path in release.files:
        assert path.is_file()
        assert path.read_bytes().count(b"\r") == 0
    for path in release.files:
        if path.name in release.event_rows and path.suffix == ".csv":
            data_lines = path.read_bytes().count(b"\n") - 1
            assert data_lines == release.event_rows[path.name]


@pytest.mark.parametrize("dataset", ["rees46", "hm", "kuairand", "microlens"])
def test_csv_headers_are_the_real_release_headers(
    dataset: str, small_releases: dict[str, GeneratedRelease]
) -> None:
    release = small_releases[dataset]
    for name, header in CSV_HEADERS[dataset].items():
        with (release.root / name).open(encoding="utf-8") as handle:
            assert handle.readline().rstrip("\n") == header, name


def test_amazon_json_keys_follow_the_release_order(
    small_releases: dict[str, GeneratedRelease],
) -> None:
    root = small_releases["amazon_hk"].root
    with (root / "Home_and_Kitchen.jsonl").open(encoding="utf-8") as handle:
        reviews = [json.loads(line) for line in handle]
    with (root / "meta_Home_and_Kitchen.jsonl").open(encoding="utf-8") as handle:
        meta = [json.loads(line) for line in handle]
    assert all(list(review) == REVIEW_KEYS for review in reviews)
    assert all(list(record) == META_KEYS for record in meta)
    first = reviews[0]
    assert isinstance(first["rating"], float) and isinstance(first["timestamp"], int)
    assert len(first["user_id"]) == 28 and first["user_id"][:2] in {"AE", "AF", "AG"}
    parents = {record["parent_asin"] for record in meta}
    assert len(parents) == len(meta)
    assert {review["parent_asin"] for review in reviews} <= parents
    times = np.array([review["timestamp"] for review in reviews])
    assert _ms("2000-01-01") <= times.min() and times.max() < _ms("2023-10-01")
    assert (times >= _ms("2015-01-01")).mean() > 0.5


def test_real_sample_headers_match_the_generated_headers(
    small_releases: dict[str, GeneratedRelease],
) -> None:
    if not REAL_SAMPLES.is_dir():
        pytest.skip("shared real samples absent: ../shared/data/real")
    pairs = [
        ("rees46/2019-Oct.csv", small_releases["rees46"].root / "2019-Oct.csv"),
        ("hm/transactions_train.csv", small_releases["hm"].root / "transactions_train.csv"),
        ("hm/customers.csv", small_releases["hm"].root / "customers.csv"),
    ]
    for real_name, generated in pairs:
        with (REAL_SAMPLES / real_name).open(encoding="utf-8", newline="") as handle:
            real_header = handle.readline().rstrip("\r\n")
        with generated.open(encoding="utf-8") as handle:
            assert handle.readline().rstrip("\n") == real_header, real_name


def test_rees46_rows_look_like_the_real_file(small_releases: dict[str, GeneratedRelease]) -> None:
    release = small_releases["rees46"]
    frame = pd.concat([pd.read_csv(path, dtype=str, keep_default_na=False) for path in release.files])
    times = pd.to_datetime(frame["event_time"], format="%Y-%m-%d %H:%M:%S UTC", utc=True)
    assert times.min() >= pd.Timestamp("2019-10-01", tz="UTC")
    assert times.max() < pd.Timestamp("2020-05-01", tz="UTC")
    counts = frame["event_type"].value_counts()
    assert 0 < counts["purchase"] < counts["cart"] < counts["view"]
    assert frame["price"].str.fullmatch(r"\d+\.\d\d").all()
    assert frame["user_id"].str.fullmatch(r"5\d{8}").all()
    assert frame["category_id"].str.fullmatch(r"\d{19}").all()
    assert frame["user_session"].str.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}").all()
    assert (frame["category_code"] == "").any() and (frame["brand"] == "").any()
    assert frame.groupby("product_id")["price"].nunique().max() == 1
    for path in release.files:
        month = pd.to_datetime(
            pd.read_csv(path, usecols=["event_time"])["event_time"],
            format="%Y-%m-%d %H:%M:%S UTC",
        ).dt.strftime("%Y-%b")
        assert (month == path.stem).all()


def test_hm_rows_look_like_the_real_files(small_releases: dict[str, GeneratedRelease]) -> None:
    root = small_releases["hm"].root
    transactions = pd.read_csv(root / "transactions_train.csv", dtype=str)
    articles = pd.read_csv(root / "articles.csv", dtype=str)
    customers = pd.read_csv(root / "customers.csv", dtype=str)
    dates = pd.to_datetime(transactions["t_dat"], format="%Y-%m-%d")
    assert dates.min() >= pd.Timestamp("2018-09-20") and dates.max() <= pd.Timestamp("2020-09-22")
    assert transactions["customer_id"].str.fullmatch(r"[0-9a-f]{64}").all()
    assert transactions["article_id"].str.fullmatch(r"0\d{9}").all()
    assert set(transactions["sales_channel_id"]) <= {"1", "2"}
    assert transactions.duplicated(["customer_id", "t_dat"]).any()
    assert set(transactions["article_id"]) <= set(articles["article_id"])
    assert (articles["article_id"].str[:7] == articles["product_code"]).all()
    assert set(transactions["customer_id"]) <= set(customers["customer_id"])
    assert customers["age"].dropna().str.fullmatch(r"\d+").all()
    assert set(customers["FN"].dropna()) == {"1.0"}


def test_kuairand_logs_are_sorted_by_user_then_time(
    small_releases: dict[str, GeneratedRelease],
) -> None:
    release = small_releases["kuairand"]
    logs = [path for path in release.files if path.name in release.event_rows]
    frame = pd.concat([pd.read_csv(path) for path in logs])
    assert frame["user_id"].between(0, 27_284).all()
    assert frame["time_ms"].between(_ms("2022-04-07 16:00"), _ms("2022-05-08 16:00") - 1).all()
    beijing = pd.to_datetime(frame["time_ms"], unit="ms") + pd.Timedelta(hours=8)
    assert (beijing.dt.strftime("%Y%m%d").astype(int) == frame["date"]).all()
    assert (beijing.dt.hour * 100 == frame["hourmin"]).all()
    assert 0.25 < frame["is_click"].mean() < 0.45
    assert 0.02 < frame["is_rand"].mean() < 0.09
    for path in logs:
        log = pd.read_csv(path)
        assert log.equals(log.sort_values(["user_id", "time_ms"], kind="stable"))
    videos = pd.read_csv(release.root / "data/video_features_basic_27k.csv", dtype=str)
    assert videos["tag"].str.contains(",").any()
    assert set(frame["video_id"].astype(str)) <= set(videos["video_id"])


def test_microlens_titles_are_always_quoted(small_releases: dict[str, GeneratedRelease]) -> None:
    root = small_releases["microlens"].root
    lines = (root / "MicroLens-1M_titles.csv").read_text(encoding="utf-8").splitlines()[1:]
    assert all(line.split(",", 1)[1].startswith('"') for line in lines)
    titles = pd.read_csv(root / "MicroLens-1M_titles.csv")
    assert titles["title"].str.contains("# ").all() and titles["title"].str.contains(",").all()
    pairs = pd.read_csv(root / "MicroLens-1M_pairs.csv")
    assert pairs["timestamp"].between(_ms("2022-06-01"), _ms("2023-06-01") - 1).all()
    assert set(pairs["item"]) <= set(titles["item"])


@pytest.mark.parametrize("dataset", SOURCES)
def test_dirty_mode_adds_exactly_the_bad_rows(dataset: str, tmp_path: Path) -> None:
    release = generate_release(dataset, tmp_path, SMALL, seed=5, dirty=True)
    total_bad = sum(release.bad_rows.values())
    assert total_bad == 8
    assert sum(release.event_rows.values()) == SMALL + total_bad
    for path in release.files:
        if path.name in release.event_rows:
            lines = path.read_bytes().count(b"\n")
            header = 0 if path.suffix == ".jsonl" else 1
            assert lines - header == release.event_rows[path.name]
    raw = b"".join(path.read_bytes() for path in release.files if path.name in release.event_rows)
    with pytest.raises(UnicodeDecodeError):
        raw.decode("utf-8")


def test_successor_pattern_beats_popularity(microlens_pattern: pd.DataFrame) -> None:
    catalogue = source_catalogue("microlens", PATTERN_SIZE, 3, microlens.ITEMS_FACTOR)
    successor = catalogue.successor + 1  # MicroLens item ids are item index + 1
    items = microlens_pattern["item"].to_numpy()
    users = microlens_pattern["user"].to_numpy()
    same_user = users[1:] == users[:-1]
    previous, following = items[:-1][same_user], items[1:][same_user]
    hit_rate = (successor[previous - 1] == following).mean()
    most_popular = microlens_pattern["item"].value_counts().index[0]
    assert hit_rate > 0.3
    assert (following == most_popular).mean() < 0.1
    assert ((previous == following).mean()) < 0.1


def test_many_items_first_appear_late(microlens_pattern: pd.DataFrame) -> None:
    start, end = microlens.ACTIVITY.start_ms, microlens.ACTIVITY.end_ms
    late = start + 0.7 * (end - start)
    first_seen = microlens_pattern.groupby("item")["timestamp"].min()
    assert (first_seen >= late).mean() >= 0.15


def test_rees46_views_follow_the_successor_pattern(tmp_path: Path) -> None:
    release = generate_release("rees46", tmp_path, PATTERN_SIZE, seed=4)
    frame = pd.concat([pd.read_csv(path) for path in release.files])
    frame["ts"] = pd.to_datetime(frame["event_time"], format="%Y-%m-%d %H:%M:%S UTC")
    frame = frame.sort_values(["user_id", "ts"], kind="stable")
    catalogue = source_catalogue("rees46", PATTERN_SIZE, 4, rees46.ITEMS_FACTOR)
    product_id = rees46.product_ids(catalogue.n_items, seed=4)
    item_of_product = pd.Series(np.arange(catalogue.n_items), index=product_id)
    item = item_of_product[frame["product_id"]].to_numpy()
    users = frame["user_id"].to_numpy()
    next_is_view = frame["event_type"].to_numpy()[1:] == "view"
    keep = (users[1:] == users[:-1]) & next_is_view
    hit_rate = (catalogue.successor[item[:-1][keep]] == item[1:][keep]).mean()
    assert hit_rate > 0.3


def test_progress_is_reported(tmp_path: Path) -> None:
    messages: list[str] = []
    generate_release("hm", tmp_path, 500, seed=1, progress=messages.append)
    assert messages and messages[-1] == "hm: 500/500 events"


@pytest.mark.parametrize(
    ("dataset", "events", "message"),
    [
        (
            "netflix",
            1_000,
            "unknown dataset 'netflix'; expected one of amazon_hk, kuairand, microlens, hm, rees46, cct",
        ),
        ("rees46", 49, "events must be at least 50, got 49"),
        ("rees46", -5, "events must be at least 50, got -5"),
    ],
)
def test_bad_arguments_are_refused(dataset: str, events: int, message: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError) as refused:
        generate_release(dataset, tmp_path, events)
    assert str(refused.value) == message
    assert not any(tmp_path.iterdir())  # nothing written
