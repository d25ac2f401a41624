"""Latent world shared by every synthetic source: kinds, items, users and their event sequences.

Why: the benchmark must be testable on data whose structure is known in advance. Every source
draws its events from the same kind of world, so a model that wins on synthetic data wins for a
reason we planted:

- items belong to kinds, and an item's words come mostly from its kind's vocabulary, so a new
  item shares tokens with older items of its kind (what content models can exploit);
- item popularity is long-tailed (what the popularity baseline exploits);
- each item has a hidden successor of the same kind, and a user's next item is that successor
  about half of the time (what only a sequence model can learn);
- users repeat earlier items now and then (what repeat-last exploits);
- items are released over time and a quarter of them only in the last part of the range, so
  an out-of-time split has genuinely new items.

Events are simulated one block of users at a time, fully vectorized: a user's item sequence is
a chain of "fresh pick", "successor of the previous item", "repeat of an earlier item" and
"same item again" steps, resolved for the whole block at once by pointer jumping.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

SUCCESSOR_PROBABILITY = 0.5
REPEAT_PROBABILITY = 0.1
BLOCK_EVENTS = 500_000
MAX_TITLE_WORDS = 6

MODE_FRESH = 0
MODE_SUCCESSOR = 1
MODE_REPEAT = 2
MODE_COPY = 3

ACTION_PLAIN = 0
ACTION_CART = 1
ACTION_PURCHASE = 2

_ENGLISH_TEXT = """
    soft classic modern light dark warm cool fresh bright deep small large mini compact slim
    round square long short wide narrow heavy basic premium deluxe simple smart quick easy happy
    funny crazy sweet spicy crispy golden silver black white red blue green pink grey brown
    wooden metal glass ceramic cotton linen wool leather steel plastic bamboo stone kitchen
    garden home office travel summer winter spring autumn morning night city country ocean
    mountain river forest desert island street village market festival party holiday cat dog
    bird fish horse rabbit panda tiger dragon duck chicken noodle rice bread cake coffee tea
    juice soup salad pizza burger dance song music guitar piano drum movie story comic anime
    game sport football basketball tennis yoga running cycling camping fishing baby kids family
    friends school student teacher doctor chef artist driver farmer cleaning cooking baking
    storage lighting bedding decor cushion blanket towel curtain lamp chair table shelf basket
    bottle cup plate bowl knife pan pot kettle mixer blender phone laptop camera speaker
    headphone watch charger cable keyboard mouse monitor printer shirt dress skirt jacket coat
    sweater jeans shorts socks shoes boots bag scarf hat belt trick challenge tutorial review
    unboxing vlog prank reaction makeover recipe secret
"""
ENGLISH_WORDS: tuple[str, ...] = tuple(_ENGLISH_TEXT.split())

_SYLLABLE_TEXT = """
    ka lo mi ra ven tor sil qua bri zen dor fi lux mar pel sor tek vio nor ul an bel cor dra el
    fen gar hol ix jun kes lin mo nex op pra quin rus sta tu vex wil yor zu
"""
_SYLLABLES: tuple[str, ...] = tuple(_SYLLABLE_TEXT.split())


def source_code(dataset: str) -> int:
    """A stable small integer per source, so two sources never share a random stream."""
    return zlib.crc32(dataset.encode("utf-8")) & 0x7FFFFFFF


def coin_words(rng: np.random.Generator, count: int) -> list[str]:
    """Distinct made-up words: kind-specific tokens that no other kind uses."""
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < count:
        n_syllables = 2 + int(rng.integers(0, 2))
        picks = rng.integers(0, len(_SYLLABLES), n_syllables)
        word = "".join(_SYLLABLES[p] for p in picks)
        if word not in seen and word not in ENGLISH_WORDS:
            seen.add(word)
            words.append(word)
    return words


def size_catalogue(events: int, items_factor: float) -> int:
    """Items grow sub-linearly with events, as in the real releases."""
    return max(40, round(items_factor * events**0.7))


def unix_ms(moment: str) -> int:
    """Unix milliseconds of an ISO date-time read as UTC: how every source states its time range."""
    return int(np.datetime64(moment, "ms").astype(np.int64))


@dataclass(frozen=True)
class Catalogue:
    """The items of one synthetic source: kinds, words, popularity, release and successors.

    Grain: one entry per item index 0..n_items-1 in every per-item array.
    """

    item_kind: np.ndarray  # int64 kind of each item
    release: np.ndarray  # float64 release time as a fraction of the source's time range
    popularity: np.ndarray  # float64 long-tailed pick weight
    item_words: np.ndarray  # int64 (n_items, MAX_TITLE_WORDS) indices into word_table
    kind_vocab: np.ndarray  # int64 (n_kinds, vocab) indices into word_table; column 0 = head
    word_table: tuple[str, ...]
    cycle_items: np.ndarray  # items grouped by kind, each kind's group in successor order
    cycle_position: np.ndarray  # position of each item inside its kind's cycle
    kind_start: np.ndarray  # first index of each kind's group in cycle_items
    kind_size: np.ndarray  # items per kind
    release_order: np.ndarray  # items sorted by release time
    release_sorted: np.ndarray  # release times in that order
    cumulative_popularity: np.ndarray  # cumulative popularity in that order

    @property
    def n_items(self) -> int:
        return int(self.item_kind.shape[0])

    @property
    def n_kinds(self) -> int:
        return int(self.kind_size.shape[0])

    def successor_after(self, items: np.ndarray, steps: np.ndarray | int) -> np.ndarray:
        """The item reached by following the hidden successor link `steps` times."""
        kinds = self.item_kind[items]
        position = (self.cycle_position[items] + steps) % self.kind_size[kinds]
        return self.cycle_items[self.kind_start[kinds] + position]

    @property
    def successor(self) -> np.ndarray:
        """The hidden successor of every item (same kind), by item index."""
        return self.successor_after(np.arange(self.n_items), 1)

    def sample_released(self, time_fraction: np.ndarray, uniform: np.ndarray) -> np.ndarray:
        """Popularity-weighted picks among the items already released at each time."""
        released = np.searchsorted(self.release_sorted, time_fraction, side="right")
        released = np.maximum(released, 1)
        target = uniform * self.cumulative_popularity[released - 1]
        picked = np.searchsorted(self.cumulative_popularity, target, side="right")
        picked = np.minimum(picked, released - 1)
        return self.release_order[picked]

    def sample_released_uniformly(self, time_fraction: np.ndarray, uniform: np.ndarray) -> np.ndarray:
        """Uniform picks among the items already released (random exposure)."""
        released = np.maximum(np.searchsorted(self.release_sorted, time_fraction, "right"), 1)
        return self.release_order[np.floor(uniform * released).astype(np.int64)]

    def words_of(self, item: int) -> list[str]:
        """The title words of one item (mostly its kind's vocabulary)."""
        return [self.word_table[w] for w in self.item_words[item]]

    def kind_words(self, kind: int) -> list[str]:
        """The vocabulary of one kind, head word first."""
        return [self.word_table[w] for w in self.kind_vocab[kind]]


def build_catalogue(n_items: int, rng: np.random.Generator) -> Catalogue:
    """Draw kinds, vocabularies, popularity, release times and successor cycles."""
    n_kinds = int(min(200, max(20, round(math.sqrt(n_items) / 1.5)), max(1, n_items // 2)))
    coined_per_kind = 4
    english_per_kind = 8
    coined = coin_words(rng, n_kinds * coined_per_kind)
    word_table = tuple(coined) + ENGLISH_WORDS
    english_offset = len(coined)
    kind_vocab = np.empty((n_kinds, coined_per_kind + english_per_kind), dtype=np.int64)
    kind_vocab[:, :coined_per_kind] = np.arange(n_kinds * coined_per_kind).reshape(n_kinds, -1)
    for kind in range(n_kinds):
        english = rng.choice(len(ENGLISH_WORDS), english_per_kind, replace=False)
        kind_vocab[kind, coined_per_kind:] = english_offset + english

    # Two items per kind at least, the rest by long-tailed kind sizes.
    kind_weight = 1.0 / np.arange(1, n_kinds + 1) ** 0.8
    kind_weight = rng.permutation(kind_weight)
    extra = rng.choice(n_kinds, n_items - 2 * n_kinds, p=kind_weight / kind_weight.sum())
    item_kind = rng.permutation(np.concatenate([np.repeat(np.arange(n_kinds), 2), extra]))
    item_kind = item_kind.astype(np.int64)

    # Half of the items exist from the start, 20% arrive mid-range, 30% in the last 30%.
    phase = rng.random(n_items)
    release = np.where(
        phase < 0.5,
        0.0,
        np.where(phase < 0.7, rng.uniform(0.0, 0.7, n_items), rng.uniform(0.7, 0.98, n_items)),
    )
    # Long tail, with newly released items twice as attractive (novelty).
    rank = rng.permutation(n_items) + 1
    popularity = np.where(release > 0, 2.0, 1.0) / (rank + 2.0) ** 1.05

    vocab_width = kind_vocab.shape[1]
    slot_from_kind = rng.random((n_items, MAX_TITLE_WORDS)) < 0.8
    kind_slot = rng.integers(0, vocab_width, (n_items, MAX_TITLE_WORDS))
    kind_slot[:, 0] = np.where(rng.random(n_items) < 0.9, 0, kind_slot[:, 0])
    slot_from_kind[:, 0] = True
    from_kind = kind_vocab[item_kind[:, None], kind_slot]
    from_anywhere = english_offset + rng.integers(0, len(ENGLISH_WORDS), (n_items, MAX_TITLE_WORDS))
    item_words = np.where(slot_from_kind, from_kind, from_anywhere)

    # Successor cycles run through each kind in release order (ties shuffled), so an item's
    # successor is usually already on sale when the item is.
    shuffled = rng.permutation(n_items)
    cycle_items = shuffled[np.lexsort((release[shuffled], item_kind[shuffled]))]
    kind_size = np.bincount(item_kind, minlength=n_kinds).astype(np.int64)
    kind_start = np.concatenate([[0], np.cumsum(kind_size)[:-1]]).astype(np.int64)
    cycle_position = np.empty(n_items, dtype=np.int64)
    cycle_position[cycle_items] = np.arange(n_items) - kind_start[item_kind[cycle_items]]

    release_order = np.argsort(release, kind="stable")
    return Catalogue(
        item_kind=item_kind,
        release=release,
        popularity=popularity,
        item_words=item_words,
        kind_vocab=kind_vocab,
        word_table=word_table,
        cycle_items=cycle_items,
        cycle_position=cycle_position,
        kind_start=kind_start,
        kind_size=kind_size,
        release_order=release_order,
        release_sorted=release[release_order],
        cumulative_popularity=np.cumsum(popularity[release_order]),
    )


@dataclass(frozen=True)
class Activity:
    """How a source's users behave in time: the part of the world that differs per source."""

    start_ms: int  # first instant of the source's range, Unix milliseconds
    end_ms: int  # end of the range (exclusive), Unix milliseconds
    mean_events_per_user: float
    max_events_per_user: int
    session_continue: float  # probability that the next event stays in the same session
    session_gap_ms: float  # mean gap between two events of one session
    start_skew: float = 1.0  # user start = U ** start_skew; below 1 pushes arrivals late
    time_warp: float = 1.0  # time fraction f becomes f ** time_warp; below 1 crowds the end
    user_cap: int | None = None  # a release with a fixed user population (KuaiRand)
    cart_rate: float = 0.0  # funnel: share of events that put the previous item in the cart
    purchase_rate: float = 0.0  # funnel: share of carts followed by a purchase

    @property
    def range_ms(self) -> int:
        return self.end_ms - self.start_ms


@dataclass(frozen=True)
class EventBlock:
    """The events of one block of users.

    Grain: one entry per event, grouped by user (users in index order), each user's events in
    sequence order with non-decreasing time.
    """

    first_user: int  # global index of the block's first user
    user_counts: np.ndarray  # events per user of the block
    user: np.ndarray  # global user index per event
    position: np.ndarray  # index of the event inside its user's sequence
    time_ms: np.ndarray  # int64 Unix milliseconds
    item: np.ndarray  # item index
    session: np.ndarray  # session number inside the block, increasing
    action: np.ndarray  # int8: ACTION_PLAIN, ACTION_CART or ACTION_PURCHASE
    rng: np.random.Generator  # the block's own stream, for source-specific columns

    @property
    def n_events(self) -> int:
        return int(self.item.shape[0])

    @property
    def n_users(self) -> int:
        return int(self.user_counts.shape[0])

    @property
    def n_sessions(self) -> int:
        return int(self.session[-1]) + 1 if self.n_events else 0


def _draw_counts(rng: np.random.Generator, n_users: int, activity: Activity) -> np.ndarray:
    """Long-tailed events per user (Lomax weights, mean about mean_events_per_user)."""
    weight = rng.pareto(1.5, n_users)
    excess = (activity.mean_events_per_user - 1.0) * weight / 2.0
    counts = 1 + np.floor(excess + rng.random(n_users)).astype(np.int64)
    return np.minimum(counts, activity.max_events_per_user)


def _allocate_counts(rng: np.random.Generator, events: int, n_users: int) -> np.ndarray:
    """Split exactly `events` over a fixed user population, long-tailed."""
    weight = np.minimum(1.0 + rng.pareto(1.5, n_users), 150.0)
    share = weight / weight.sum() * (events - n_users)
    counts = 1 + np.floor(share).astype(np.int64)
    missing = events - int(counts.sum())
    if missing > 0:
        counts[np.argsort(-(share - np.floor(share)), kind="stable")[:missing]] += 1
    return counts


def capped_user_count(events: int, activity: Activity) -> int | None:
    """The number of users of a fixed-population source, None when users are open-ended."""
    if activity.user_cap is None:
        return None
    return int(min(activity.user_cap, max(1, round(events / activity.mean_events_per_user))))


def plan_user_blocks(
    events: int, activity: Activity, rng: np.random.Generator, block_events: int = BLOCK_EVENTS
) -> Iterator[np.ndarray]:
    """Yield the events-per-user of successive user blocks; the counts sum to `events` exactly."""
    n_users = capped_user_count(events, activity)
    if n_users is not None:
        counts = _allocate_counts(rng, events, n_users)
        block_of_user = (np.cumsum(counts) - counts) // block_events
        bounds = np.flatnonzero(np.diff(block_of_user)) + 1
        yield from np.split(counts, bounds)
        return
    remaining = events
    while remaining > 0:
        target = min(remaining, block_events)
        n_draw = max(16, int(target / activity.mean_events_per_user * 1.2) + 1)
        counts = _draw_counts(rng, n_draw, activity)
        cumulative = np.cumsum(counts)
        if cumulative[-1] >= target:
            last = int(np.searchsorted(cumulative, target))
            counts = counts[: last + 1].copy()
            counts[-1] -= int(cumulative[last]) - target
        remaining -= int(counts.sum())
        yield counts


def _segment_exclusive_cumsum(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Cumulative sum restarting at each segment, excluding the element itself."""
    total = np.cumsum(values)
    segment_end = np.cumsum(counts)
    segment_base = np.concatenate([[0.0], total[segment_end[:-1] - 1]])
    return total - values - np.repeat(segment_base, counts)


def _follow_to_roots(parent: np.ndarray, shift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pointer jumping: each event's root (a fresh pick) and the successor steps from it."""
    pointer = parent.copy()
    steps = shift.copy()
    while True:
        jumped = pointer[pointer]
        if np.array_equal(jumped, pointer):
            return pointer, steps
        steps = steps + steps[pointer]
        pointer = jumped


def simulate_block(
    catalogue: Catalogue,
    activity: Activity,
    counts: np.ndarray,
    first_user: int,
    rng: np.random.Generator,
) -> EventBlock:
    """Simulate the event sequences of one block of users (vectorized over all its events)."""
    n_users = int(counts.shape[0])
    n_events = int(counts.sum())
    offsets = np.cumsum(counts) - counts
    user_local = np.repeat(np.arange(n_users), counts)
    position = np.arange(n_events) - offsets[user_local]
    is_first = position == 0

    # Funnel steps (cart, purchase) repeat the previous item inside the same session.
    action = np.zeros(n_events, dtype=np.int8)
    if activity.cart_rate > 0:
        cart = (~is_first) & (rng.random(n_events) < activity.cart_rate)
        cart[1:] &= ~cart[:-1]
        purchase = np.zeros(n_events, dtype=bool)
        purchase[1:] = cart[:-1] & (rng.random(n_events - 1) < activity.purchase_rate)
        purchase &= ~is_first
        action[cart] = ACTION_CART
        action[purchase] = ACTION_PURCHASE
    copies = action != ACTION_PLAIN

    # Sessions are bursts; session starts spread over the user's own active span.
    session_start = is_first | ((rng.random(n_events) > activity.session_continue) & ~copies)
    session = np.cumsum(session_start) - 1
    # Heavy users stay active longer; starts spread so that activity covers the whole range.
    span_power = 1.0 / (1.0 + np.log(counts.astype(np.float64)))
    user_span = rng.random(n_users) ** span_power
    user_start = (1.0 - user_span) * rng.random(n_users) ** activity.start_skew
    session_user = user_local[session_start]
    session_draw = rng.random(session_user.shape[0])
    session_place = session_draw[np.lexsort((session_draw, session_user))]
    session_fraction = user_start[session_user] + user_span[session_user] * session_place
    if activity.time_warp != 1.0:
        session_fraction = session_fraction**activity.time_warp
    within_gap = np.where(session_start, 0.0, rng.exponential(activity.session_gap_ms, n_events))
    events_per_session = np.bincount(session)
    within_offset = _segment_exclusive_cumsum(within_gap, events_per_session) + within_gap
    relative = session_fraction[session] * activity.range_ms + within_offset
    relative = np.clip(relative, 0, activity.range_ms - 1).astype(np.int64)
    # Non-decreasing per user: a running maximum that restarts at each user.
    lifted = relative + user_local.astype(np.int64) * activity.range_ms
    relative = np.maximum.accumulate(lifted) - user_local.astype(np.int64) * activity.range_ms
    time_fraction = relative / activity.range_ms

    # Item chain: fresh pick, successor of previous, repeat of an earlier event, or copy.
    fresh = catalogue.sample_released(time_fraction, rng.random(n_events))
    draw = rng.random(n_events)
    mode = np.where(
        draw < SUCCESSOR_PROBABILITY,
        MODE_SUCCESSOR,
        np.where(draw < SUCCESSOR_PROBABILITY + REPEAT_PROBABILITY, MODE_REPEAT, MODE_FRESH),
    ).astype(np.int8)
    mode[is_first] = MODE_FRESH
    mode[copies] = MODE_COPY
    earlier = offsets[user_local] + np.floor(rng.random(n_events) * position).astype(np.int64)
    index = np.arange(n_events)
    parent = np.where(mode == MODE_FRESH, index, np.where(mode == MODE_REPEAT, earlier, index - 1))
    shift = (mode == MODE_SUCCESSOR).astype(np.int64)
    while True:
        root, steps = _follow_to_roots(parent, shift)
        item = catalogue.successor_after(fresh[root], steps)
        unreleased = (mode == MODE_SUCCESSOR) & (catalogue.release[item] > time_fraction)
        if not unreleased.any():
            break
        # A successor not yet released falls back to a fresh pick.
        mode[unreleased] = MODE_FRESH
        parent[unreleased] = index[unreleased]
        shift[unreleased] = 0

    return EventBlock(
        first_user=first_user,
        user_counts=counts,
        user=first_user + user_local,
        position=position,
        time_ms=activity.start_ms + relative,
        item=item,
        session=session,
        action=action,
        rng=rng,
    )


def iter_event_blocks(
    dataset: str,
    catalogue: Catalogue,
    activity: Activity,
    events: int,
    seed: int,
    block_events: int = BLOCK_EVENTS,
    progress: Callable[[str], None] | None = None,
) -> Iterator[EventBlock]:
    """Stream a source's events block by block; same seed and size give the same blocks.

    With `progress`, a `progress_line` is reported once the caller has handled each block
    (when it asks for the next one), so every generator reports progress the same way.
    """
    code = source_code(dataset)
    count_rng = np.random.default_rng([seed, code, 1])
    first_user = 0
    done = 0
    for block_number, counts in enumerate(plan_user_blocks(events, activity, count_rng, block_events)):
        block_rng = np.random.default_rng([seed, code, 2, block_number])
        block = simulate_block(catalogue, activity, counts, first_user, block_rng)
        yield block
        first_user += int(counts.shape[0])
        done += block.n_events
        if progress is not None:
            progress(progress_line(dataset, done, events))


def catalogue_rng(dataset: str, seed: int) -> np.random.Generator:
    """The random stream of a source's catalogue (shared with tests that need the successors)."""
    return np.random.default_rng([seed, source_code(dataset), 0])


def source_catalogue(dataset: str, events: int, seed: int, items_factor: float) -> Catalogue:
    """A source's catalogue at a given size; tests rebuild it the same way to find successors."""
    return build_catalogue(size_catalogue(events, items_factor), catalogue_rng(dataset, seed))


def side_rng(dataset: str, seed: int, purpose: int) -> np.random.Generator:
    """An independent stream for one side task of a source (metadata, dirty rows, ...)."""
    return np.random.default_rng([seed, source_code(dataset), 3, purpose])


def hex_strings(rng: np.random.Generator, count: int, length: int) -> np.ndarray:
    """`count` random lowercase hex strings of `length` characters (vectorized)."""
    return _alphabet_strings(rng, count, length, b"0123456789abcdef")


def alnum_strings(rng: np.random.Generator, count: int, length: int) -> np.ndarray:
    """`count` random uppercase alphanumeric strings of `length` characters."""
    return _alphabet_strings(rng, count, length, b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def _alphabet_strings(rng: np.random.Generator, count: int, length: int, alphabet: bytes) -> np.ndarray:
    letters = np.frombuffer(alphabet, dtype=np.uint8)
    codes = letters[rng.integers(0, len(letters), (count, length))]
    return np.ascontiguousarray(codes).view(f"S{length}").ravel().astype(f"U{length}")


def uuid_strings(rng: np.random.Generator, count: int) -> np.ndarray:
    """Random version-4 UUID strings (8-4-4-4-12 hex), vectorized."""
    letters = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    nibbles = rng.integers(0, 16, (count, 32))
    nibbles[:, 12] = 4
    nibbles[:, 16] = 8 + (nibbles[:, 16] & 3)
    codes = np.full((count, 36), ord("-"), dtype=np.uint8)
    hex_columns = [c for c in range(36) if c not in (8, 13, 18, 23)]
    codes[:, hex_columns] = letters[nibbles]
    return np.ascontiguousarray(codes).view("S36").ravel().astype("U36")


@dataclass(frozen=True)
class ScatteredIds:
    """A bijection from indices to scattered ids in [low, low + modulus) (modulus prime).

    Why: real ids look random and never collide; an affine map modulo a prime gives both for
    any number of users or items, block by block, without remembering what was issued.
    """

    low: int
    modulus: int
    multiplier: int
    offset: int

    @classmethod
    def draw(cls, low: int, modulus: int, rng: np.random.Generator) -> ScatteredIds:
        return cls(low, modulus, int(rng.integers(1, modulus)), int(rng.integers(0, modulus)))

    def __call__(self, index: np.ndarray) -> np.ndarray:
        scrambled = (index.astype(np.int64) * self.multiplier + self.offset) % self.modulus
        return self.low + scrambled


def progress_line(dataset: str, done: int, total: int) -> str:
    """The short progress message every generator reports after each block."""
    return f"{dataset}: {done:,}/{total:,} events"
