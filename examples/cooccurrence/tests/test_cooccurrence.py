"""The plug-in's own tests, run from intent-spark's environment: ``intent check-model`` over its
whole life cycle, then its scores on a catalogue small enough to work out by hand."""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from intent_cooccurrence import CoOccurrence

from intent_spark.cli import main
from intent_spark.plugin import Catalogue, TrainingData


def test_check_model_passes_every_step(capsys):
    assert main(["check-model", "intent_cooccurrence:CoOccurrence"]) == 0
    out = capsys.readouterr().out.splitlines()
    steps = [line.split()[1] for line in out if line.startswith("ok ")]
    assert steps == ["build", "fit", "save", "load", "scorable", "scores", "ranks", "reload"]
    assert "gave torch.float32 (12, 61) on cpu" in next(
        line for line in out if line.startswith("ok   scores")
    )


def test_scores_count_what_followed_the_last_item():
    # items 1, 2, 3 seen (train counts 3, 2, 1), 4 new; one training row: 1 -> 2 -> 1 -> 3
    catalogue = Catalogue(np.array([0, 3, 2, 1, 0]), np.zeros((5, 1), dtype=np.int64))
    model = CoOccurrence(catalogue, CoOccurrence.Settings(prior_weight=0.5), torch.device("cpu"))
    rows = torch.tensor([[0, 1, 2, 1, 3]])
    training = TrainingData(
        lambda *_: contextlib.nullcontext(iter([rows])),
        context=4,
        seed=0,
        device=torch.device("cpu"),
        progress=print,
    )
    assert model.fit(training) == {"pairs": 3.0, "transitions": 3.0}
    scores = model.scores(torch.tensor([[0, 0, 0, 1]]))
    # after 1: 2 once and 3 once, plus the prior 0.5 * count / (3 + 1)
    assert scores[0, 1:].tolist() == [0.375, 1.25, 1.125, 0.0]
