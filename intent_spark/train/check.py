"""``intent check-model SPEC``: a plug-in's whole life cycle in seconds, with no Spark and no lake.

A small generated catalogue (seen items 1..S by training count, new items S+1..N) and training
rows in memory, shaped as the readers give them; then build, fit, save, load, the
model's answer on a batch of contexts through the framework's own checks (``intent_spark.train.ranker``),
and ranks by the framework's rule, the loaded model's against the fitted one's. Each step
prints what it got and gave (shapes, dtypes, devices); the first fault stops the check with one
line and, for the plug-in's own exception, its frames.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from intent_spark.core.errors import IntentError, PluginError


@dataclass(frozen=True)
class CheckSizes:
    """The generated data: small enough for seconds, with every case a real split has."""

    items: int = 60  # catalogue items; the last ``new`` have no training events
    new: int = 12
    users: int = 40
    context: int = 8
    tokens: int = 4  # metadata tokens per item
    seed: int = 0


class CheckFailed(Exception):
    """A step of the check found a fault; ``line`` says which step and what."""

    def __init__(self, line: str, error: BaseException | None = None) -> None:
        super().__init__(line)
        self.line, self.error = line, error


def generated_catalogue(sizes: CheckSizes):
    """Catalogue indices 1..S seen (training counts falling), S+1..N new (count 0)."""
    from intent_spark.plugin import Catalogue

    rng = np.random.default_rng(sizes.seed)
    seen = sizes.items - sizes.new
    counts = np.zeros(sizes.items + 1, dtype=np.int64)
    counts[1 : seen + 1] = np.sort(rng.integers(1, 50, seen))[::-1]
    tokens = np.zeros((sizes.items + 1, sizes.tokens), dtype=np.int64)
    tokens[1:] = rng.integers(1, 3 * sizes.tokens + 1, (sizes.items, sizes.tokens))
    texts = ["", *(f"Item {i}. category c{i % 5}. brand b{i % 3}" for i in range(1, sizes.items + 1))]
    return Catalogue(counts, tokens, text_loader=lambda: texts)


def generated_histories(sizes: CheckSizes) -> list[np.ndarray]:
    """Each user's items in time order: seen items only before the last three, which may be new."""
    rng = np.random.default_rng(sizes.seed + 1)
    seen = sizes.items - sizes.new
    out = []
    for _ in range(sizes.users):
        length = int(rng.integers(4, 3 * sizes.context))
        items = rng.integers(1, seen + 1, length)
        items[-3:] = rng.integers(1, sizes.items + 1, 3)  # the scored tail: new items too
        out.append(items.astype(np.int64))
    return out


def training_rows(histories: list[np.ndarray], context: int) -> np.ndarray:
    """(rows, context + 1) left-padded with 0, each training transition in exactly one row, as
    the training sequences hold them (the last three events of each user are for scoring)."""
    rows = []
    for items in histories:
        train = items[:-3]
        for end in range(len(train), 1, -context):
            window = train[max(0, end - context - 1) : end]
            rows.append(np.concatenate([np.zeros(context + 1 - len(window), np.int64), window]))
    return np.stack(rows)


def in_memory_batches(rows: np.ndarray) -> Callable[..., Any]:
    """``TrainingData``'s opener over ``rows``: shuffled batches, endless or ``epochs`` passes."""

    def open_batches(batch_size: int, shuffle_buffer: int, seed: int, epochs: int | None):
        @contextmanager
        def opened() -> Iterator[Iterator[torch.Tensor]]:
            def stream() -> Iterator[torch.Tensor]:
                rng = np.random.default_rng(seed)
                passes = 0
                while epochs is None or passes < epochs:
                    order = rng.permutation(len(rows))
                    for start in range(0, len(order), batch_size):
                        yield torch.from_numpy(rows[order[start : start + batch_size]])
                    passes += 1

            yield stream()

        return opened()

    return open_batches


def described(value: Any) -> str:
    """A value as the check prints it: a tensor's dtype, shape and device; an array's dtype and
    shape; a dict's keys; else its type."""
    if isinstance(value, torch.Tensor):
        return f"torch.{str(value.dtype).removeprefix('torch.')} {tuple(value.shape)} on {value.device}"
    if isinstance(value, np.ndarray):
        return f"numpy {value.dtype} {value.shape}"
    if isinstance(value, dict):
        shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in value.items())
        return "{" + shown + "}"
    return type(value).__name__


def check_model(
    spec: str,
    conf,
    *,
    sizes: CheckSizes = CheckSizes(),
    device: torch.device | None = None,
    say: Callable[[str], None] = print,
) -> None:
    """Run the life cycle; raise ``CheckFailed`` at the first fault."""
    from intent_spark.plugin import pick_device
    from intent_spark.train.registry import resolve

    try:
        cls = resolve(spec)
    except IntentError as exc:
        raise CheckFailed(f"resolve: {exc}", exc) from exc
    check = _LifeCycle(cls, replace(conf, context=sizes.context), sizes, device or pick_device(), say)
    say(
        f"check-model {spec}: {cls.name}, a {cls.kind} model, on {check.device.type}; a generated catalogue "
        f"of {check.catalogue.n_items} items ({check.catalogue.n_trained} trained, the rest new), "
        f"{sizes.users} users, context {sizes.context}"
    )
    fitted = check.build()
    check.fit(fitted)
    loaded = check.save_and_load(fitted)
    check.answer(loaded)
    ranks = check.ranks(loaded)
    if fitted is not loaded:
        check.reload(fitted, ranks)


class _LifeCycle:
    """The steps of ``check_model`` on one generated catalogue: each prints what it got and gave,
    and turns a fault into ``CheckFailed``."""

    def __init__(
        self, cls, conf, sizes: CheckSizes, device: torch.device, say: Callable[[str], None]
    ) -> None:
        from intent_spark.train.readers import UserBlock

        self.cls, self.conf, self.sizes, self.device, self.say = cls, conf, sizes, device, say
        self.catalogue = generated_catalogue(sizes)
        self.histories = generated_histories(sizes)
        self.blocks = [
            UserBlock(items, np.arange(len(items) - 3, len(items), dtype=np.int64), np.arange(3) + 3 * user)
            for user, items in enumerate(self.histories)
        ]
        self.clock = time.monotonic()

    def ok(self, step: str, line: str) -> None:
        now = time.monotonic()
        self.say(f"ok   {step:<8} {line} ({now - self.clock:.2f}s)")
        self.clock = now

    def step(self, name: str, call: Callable[[], Any]) -> Any:
        from intent_spark.train.ranker import ModelFault

        try:
            return call()
        except PluginError as exc:
            raise CheckFailed(str(exc), exc) from exc
        except (IntentError, ModelFault) as exc:
            raise CheckFailed(f"{name}: {exc}", exc) from exc
        except Exception as exc:  # noqa: BLE001 - framework code around the plug-in's answer
            from intent_spark.train.plugin_errors import plugin_error

            error = plugin_error(self.cls.name, name, exc, self.cls)
            raise CheckFailed(str(error), error) from exc

    def build(self):
        from intent_spark.train.build import build_model

        cls, catalogue = self.cls, self.catalogue
        got = (
            f"catalogue train_counts {described(catalogue.train_counts)}, token_ids "
            f"{described(catalogue.token_ids)}, settings {self.step('build', lambda: self.conf.settings(cls.name))}"
        )
        fitted = self.step("build", lambda: build_model(cls, catalogue, self.conf, self.device))
        self.ok("build", f"{cls.__name__}({got}, device {self.device.type})")
        return fitted

    def fit(self, fitted) -> None:
        from intent_spark.plugin import TrainingData
        from intent_spark.train.build import plugin_call

        if not self.cls.fits:
            self.ok("fit", "fits nothing (fits = False): scored without a train run")
            return
        context = self.sizes.context
        rows = training_rows(self.histories, context)
        training = TrainingData(
            in_memory_batches(rows),
            context=context,
            seed=self.conf.scoring(self.cls.name).seed,
            device=self.device,
            progress=lambda line: self.say(f"     fit      {line}"),
        )
        torch.manual_seed(training.seed)
        stats = self.step("fit", lambda: plugin_call(self.cls.name, "fit", fitted.fit, training)) or {}
        if not isinstance(stats, dict):
            raise CheckFailed(
                f"fit: returned {type(stats).__name__}, expected a dict of what to log (or None)"
            )
        self.ok(
            "fit",
            f"got {len(rows)} training rows as torch.int64 ({context + 1},) each, batches on cpu; "
            f"gave {described(stats)} (numbers logged to MLflow as train.<split>.<key>)",
        )

    def save_and_load(self, fitted):
        from intent_spark.train.build import build_model, plugin_call

        where = self.cls.name
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            self.step("save", lambda: plugin_call(where, "save", fitted.save, folder))
            files = sorted(p for p in folder.rglob("*") if p.is_file())
            listed = (
                ", ".join(f"{p.relative_to(folder)} ({p.stat().st_size:,} bytes)" for p in files) or "nothing"
            )
            self.ok("save", f"wrote {listed}")
            loaded = self.step("load", lambda: build_model(self.cls, self.catalogue, self.conf, self.device))
            self.step("load", lambda: plugin_call(where, "load from its saved folder", loaded.load, folder))
            self.ok("load", "a model built the same way read the folder back")
        return loaded

    def answer(self, loaded) -> None:
        """``scorable`` and the model's own answer on a batch of contexts, through the checks
        the framework puts every answer through."""
        from intent_spark.plugin import HistoryModel, ScoresModel, VectorsModel
        from intent_spark.train.ranker import _checked, _checked_mask, context_windows

        n_items = self.catalogue.n_items
        mask = self.step("scorable", lambda: _checked_mask(loaded.scorable(), n_items))
        self.ok(
            "scorable", f"gave {described(mask)}: {int(mask.sum())} items scored, the rest tie at the bottom"
        )
        if issubclass(self.cls, HistoryModel):
            self.ok(
                "history",
                f"rank_and_ties gets a user's items ({described(self.blocks[0].items)}) and target positions",
            )
            return
        if not issubclass(self.cls, (ScoresModel, VectorsModel)):
            return
        windows = np.concatenate(
            [context_windows(b.items, b.targets, self.sizes.context) for b in self.blocks[:4]]
        )
        contexts = torch.from_numpy(windows).to(self.device)
        loaded.eval()
        with torch.no_grad():
            if issubclass(self.cls, ScoresModel):
                values = self.step(
                    "scores", lambda: _checked(loaded.scores(contexts), "scores", (len(windows), n_items + 1))
                )
                self.ok(
                    "scores", f"got contexts {described(contexts)} (0 = padding); gave {described(values)}"
                )
                return
            vectors = self.step(
                "vectors", lambda: _checked(loaded.item_vectors(), "item vectors", (n_items + 1, None))
            )
            self.ok("vectors", f"gave item_vectors {described(vectors)}")
            states = self.step(
                "encode",
                lambda: _checked(
                    loaded.encode(contexts, vectors), "context states", (len(windows), vectors.shape[1])
                ),
            )
            self.ok(
                "encode", f"got contexts {described(contexts)} and the item vectors; gave {described(states)}"
            )

    def ranked(self, model) -> tuple[np.ndarray, np.ndarray]:
        from intent_spark.train.ranker import rank_blocks

        settings = self.conf.scoring(self.cls.name)
        out = list(
            rank_blocks(
                model,
                self.blocks,
                context=self.sizes.context,
                batch_size=settings.score_batch,
                chunk_items=settings.score_chunk_items,
                device=self.device,
            )
        )
        return np.concatenate([r for _, r, _ in out]), np.concatenate([t for _, _, t in out])

    def ranks(self, loaded) -> np.ndarray:
        ranks, ties = self.step("ranks", lambda: self.ranked(loaded))
        self.ok(
            "ranks",
            f"{len(ranks)} targets ranked by the framework's rule: ranks {ranks.min():g}..{ranks.max():g} of "
            f"{self.catalogue.n_items}, mean {ranks.mean():.2f}, {int((ties > 0).sum())} tied",
        )
        return ranks

    def reload(self, fitted, ranks: np.ndarray) -> None:
        """The fitted model ranks every target as the loaded one does: save keeps what scoring needs."""
        again, _ = self.step("ranks", lambda: self.ranked(fitted))
        differ = np.flatnonzero(again != ranks)
        if differ.size:
            i = int(differ[0])
            raise CheckFailed(
                f"load: the loaded model ranks {differ.size} of {len(ranks)} targets otherwise than the fitted "
                f"one (target {i}: rank {ranks[i]:g}, fitted {again[i]:g}); save does not keep what scoring needs"
            )
        self.ok("reload", "the loaded model ranks every target as the fitted one does")


def failure_lines(failed: CheckFailed, verbose: bool = False) -> list[str]:
    """The fault's line and, for the plug-in's own exception, its frames (``verbose``: its
    whole traceback)."""
    lines = [f"FAIL {failed.line}"]
    error = failed.error
    while error is not None and not isinstance(error, PluginError):
        error = error.__cause__
    if isinstance(error, PluginError) and verbose:
        lines.append(error.traceback.rstrip("\n"))
    elif isinstance(error, PluginError) and error.frames:
        lines.append(error.frames)
    return lines
