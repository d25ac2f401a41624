"""The model plug-in interface: registration by name, entry point and spec; the framework's
checks of what a model gives back; scoring a model that fits nothing; and every bad plug-in as
a one-line error that writes nothing.

The toy split is test_split's (seed 4): the test catalogue is a=1 b=2 c=3 d=4 (seen) and the
new items e=5 q=6 y=7 z=8, so ``PrefixScores`` (score(i) = -i) ranks a target at its index.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, copy_reference_run
from pyspark.sql import functions as F

from intent_spark.cli import main
from intent_spark.core import schema as S
from intent_spark.core.errors import IntentError
from intent_spark.lake.tables import has_table, read_table, write_dataset
from intent_spark.plugin import Catalogue
from intent_spark.train import registry
from intent_spark.train.ranker import ModelFault, rank_blocks
from intent_spark.train.readers import UserBlock

FAULTS = "plugin_faults"


def _catalogue(n_items: int = 6, seen: int = 4) -> Catalogue:
    counts = np.zeros(n_items + 1, dtype=np.int64)
    counts[1 : seen + 1] = np.arange(seen, 0, -1)
    return Catalogue(counts, np.zeros((n_items + 1, 1), dtype=np.int64))


def _ranked(spec: str, catalogue: Catalogue | None = None):
    cls = registry.resolve(f"{FAULTS}:{spec}")
    model = cls(catalogue or _catalogue(), cls.Settings(), torch.device("cpu"))
    blocks = [UserBlock(np.array([1, 2, 3, 6, 4]), np.array([1, 3, 4]), np.array([10, 11, 12]))]
    out = list(
        rank_blocks(model, blocks, context=2, batch_size=2, chunk_items=100, device=torch.device("cpu"))
    )
    return np.concatenate([r for _, r, _ in out]), np.concatenate([t for _, _, t in out])


# --- what the framework makes of a model's scores ---


def test_a_score_model_is_ranked_by_the_rule_with_unscorable_items_at_the_bottom():
    ranks, ties = _ranked("PrefixScores")
    # targets: item 2 (rank 2), item 6 (rank 6), item 4 (rank 4); every item scorable, no ties
    assert ranks.tolist() == [2.0, 6.0, 4.0] and ties.tolist() == [0, 0, 0]


def test_items_a_model_cannot_score_tie_at_the_bottom_whatever_it_returned():
    class SeenOnly(registry.resolve(f"{FAULTS}:PrefixScores")):  # type: ignore[misc]
        name = "seen_only"

        def scorable(self):
            return torch.from_numpy(self.catalogue.seen)

    model = SeenOnly(_catalogue(), SeenOnly.Settings(), torch.device("cpu"))
    blocks = [UserBlock(np.array([1, 2, 3, 6, 4]), np.array([1, 3, 4]), np.array([10, 11, 12]))]
    ranks, ties = next(
        rank_blocks(model, blocks, context=2, batch_size=8, chunk_items=100, device=torch.device("cpu"))
    )[1:]
    # item 6 is new: it and item 5 share the bottom, 1 + 4 + (2 - 1) / 2 = 5.5, one other tied
    assert ranks.tolist() == [2.0, 5.5, 4.0] and ties.tolist() == [0, 1, 0]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("WrongShapeScores", r"scores of shape \(3, 6\), expected \(3, 7\)"),
        ("IntegerScores", r"scores must be floating point, got torch.int64"),
        ("NaNScores", r"NaN or infinite scores .* \(never ranked\)"),
        ("InfiniteScores", r"NaN or infinite scores"),
        ("NumpyScores", r"scores must be a torch tensor, got ndarray"),
        ("NaNVectors", r"item vectors hold NaN or infinite values"),
        ("RanksOutOfRange", r"ranks outside 1\.\.6"),
    ],
)
def test_every_broken_answer_of_a_model_is_named_never_ranked(spec, message):
    with pytest.raises(ModelFault, match=message):
        _ranked(spec)


# --- a plug-in's own exceptions: its file and line ---

PLUGIN_FAULTS_FILE = Path(__file__).resolve().parent / "plugin_faults.py"


def _line_of(text: str) -> int:
    """The line of plugin_faults.py holding ``text``, found by reading the file."""
    lines = PLUGIN_FAULTS_FILE.read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


def _one_batch(*_):
    import contextlib

    return contextlib.nullcontext(iter([torch.zeros((4, 3), dtype=torch.long)]))


def test_a_plugins_own_exception_is_one_line_with_its_file_and_line_and_its_frames():
    from intent_spark.core.errors import PluginError
    from intent_spark.plugin import TrainingData
    from intent_spark.train.build import plugin_call

    cls = registry.resolve(f"{FAULTS}:FitRaises")
    model = cls(_catalogue(), cls.Settings(), torch.device("cpu"))
    training = TrainingData(_one_batch, context=2, seed=0, device=torch.device("cpu"), progress=print)
    with pytest.raises(PluginError) as caught:
        plugin_call("toy fit_raises test", "fit", model.fit, training)
    raised = _line_of('raise RuntimeError("boom: my own bug inside fit")')
    called = _line_of("return self._count(first)")
    assert str(caught.value) == (
        "toy fit_raises test: fit failed: RuntimeError: boom: my own bug inside fit "
        f"(plugin_faults.py line {raised}, in _count)"
    )
    assert caught.value.frames.splitlines() == [
        f'  File "{PLUGIN_FAULTS_FILE}", line {called}, in fit',
        "    return self._count(first)",
        f'  File "{PLUGIN_FAULTS_FILE}", line {raised}, in _count',
        '    raise RuntimeError("boom: my own bug inside fit")',
    ]
    whole = caught.value.traceback
    assert whole.startswith("Traceback (most recent call last):") and "intent_spark/train/build.py" in whole


# --- intent check-model: the life cycle without Spark ---


def test_check_model_runs_a_good_plugin_through_every_step(capsys):
    assert main(["check-model", f"{FAULTS}:PrefixScores"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        f"check-model {FAULTS}:PrefixScores: prefix_scores, a scores model, on cpu; a generated catalogue of "
        "60 items (48 trained, the rest new), 40 users, context 8"
    )
    assert [line.split()[1] for line in out[1:-1]] == [
        "build",
        "fit",
        "save",
        "load",
        "scorable",
        "scores",
        "ranks",
        "reload",
    ]
    assert (
        "got contexts torch.int64 (12, 8) on cpu (0 = padding); gave torch.float32 (12, 61) on cpu" in out[6]
    )
    # score(i) = -i: each target ranks at its own index; 40 users' last three events, 120 targets
    assert (
        out[7].startswith("ok   ranks    120 targets ranked by the framework's rule:") and "0 tied" in out[7]
    )
    assert out[-1].startswith(f"intent check-model: {FAULTS}:PrefixScores: every step passed in ")


@pytest.mark.parametrize(
    ("spec", "fault"),
    [
        ("WrongShapeScores", "scores: scores of shape (12, 60), expected (12, 61)"),
        ("IntegerScores", "scores: scores must be floating point, got torch.int64"),
        ("NaNScores", "ranks: NaN or infinite scores for items it says it can score (never ranked)"),
        ("NaNVectors", "ranks: item vectors hold NaN or infinite values"),
        ("RanksOutOfRange", "ranks: ranks outside 1..60 or not finite"),
        (
            "FitRaises",
            "fit_raises: fit failed: RuntimeError: boom: my own bug inside fit (plugin_faults.py line {raised}, in _count)",
        ),
        (
            "ScoresRaise",
            "scores_raise: scores failed: AttributeError: 'ScoresRaise' object has no attribute 'table' "
            "(plugin_faults.py line {table}, in scores)",
        ),
    ],
)
def test_check_model_stops_at_the_first_fault_naming_it(capsys, spec, fault):
    assert main(["check-model", f"{FAULTS}:{spec}"]) == 1
    err = capsys.readouterr().err.splitlines()
    lines = {
        "raised": _line_of('raise RuntimeError("boom: my own bug inside fit")'),
        "table": _line_of("self.table["),
    }
    assert err[0] == "FAIL " + fault.format(**lines)
    assert err[-1].startswith(f"intent check-model: {FAULTS}:{spec}: failed after ")
    if spec.endswith("Raises") or spec.endswith("Raise"):  # the plug-in's own frames under the line
        assert err[1].startswith(f'  File "{PLUGIN_FAULTS_FILE}", line ') and "Traceback" not in "".join(err)


def test_check_model_with_verbose_prints_the_whole_traceback(capsys, monkeypatch):
    monkeypatch.setenv("INTENT_VERBOSE", "0")  # restored after: --verbose sets it for the process
    assert main(["--verbose", "check-model", f"{FAULTS}:FitRaises"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last):" in err and "intent_spark/train/build.py" in err


def test_the_examples_own_tests_pass():
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLE.parent.parent), str(EXAMPLE)])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", str(EXAMPLE / "tests")],
        env=env,
        capture_output=True,
        text=True,
        cwd=EXAMPLE,
    )
    assert done.returncode == 0, done.stdout[-2000:]


def test_a_plugin_on_the_old_import_path_still_runs_and_is_told_where_the_names_moved(
    tmp_path, monkeypatch, capsys
):
    (tmp_path / "old_path_plugin.py").write_text(
        textwrap.dedent(
            """
            import torch
            from models.interface import ScoresModel

            class Uniform(ScoresModel):
                name = "uniform"
                fits = False

                def scores(self, contexts):
                    return torch.zeros(len(contexts), self.catalogue.n_items + 1, device=contexts.device)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "models.interface", raising=False)
    with pytest.warns(FutureWarning, match=r"^models\.interface moved to intent_spark\.plugin: import the"):
        assert main(["check-model", "old_path_plugin:Uniform"]) == 0
    assert "old_path_plugin:Uniform: every step passed" in capsys.readouterr().out
    import intent_spark.plugin
    import models.interface

    assert models.interface.ScoresModel is intent_spark.plugin.ScoresModel


# --- registration ---


def test_built_in_models_are_registered_with_their_origin():
    known = registry.registered()
    assert list(known)[:6] == ["popularity", "repeat_last", "sasrec", "sasrec_f", "gru4rec", "text_encoder"]
    assert {known[name].origin for name in list(known)[:6]} == {"built-in"}
    assert registry.resolve("gru4rec").kind == "vectors"


def test_an_unknown_name_lists_the_registered_models():
    with pytest.raises(
        IntentError, match=r"^unknown model 'bert4rec' \(registered: popularity, repeat_last, "
    ):
        registry.resolve("bert4rec")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "no_such_module_xyz:Model",
            r"^model 'no_such_module_xyz:Model' \(spec .*\): import failed: ModuleNotFoundError",
        ),
        (f"{FAULTS}:Missing", r"plugin_faults has no Missing"),
        (f"{FAULTS}:NotAModel", r"is not a subclass of intent_spark.plugin.Model"),
        (f"{FAULTS}:KindByName", r"subclass VectorsModel, ScoresModel or HistoryModel \(kind 'scores'\)$"),
        ("plugin_faults", r"a spec is module:Class|unknown model"),
    ],
)
def test_a_spec_that_is_not_a_model_is_one_line_naming_it(spec, message):
    with pytest.raises(IntentError, match=message):
        registry.resolve(spec)


def _entry_point(tmp_path, monkeypatch, name: str, target: str) -> None:
    """A distribution on sys.path declaring one model entry point, as pip would install it."""
    info = tmp_path / "broken_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\n{name} = {target}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.installed.cache_clear()
    monkeypatch.setattr(registry, "_SPECS", {})


def test_an_entry_point_that_fails_to_import_is_named_with_its_distribution(tmp_path, monkeypatch):
    (tmp_path / "broken_plugin_code.py").write_text("raise ImportError('needs libfoo')\n")
    _entry_point(tmp_path, monkeypatch, "broken", "broken_plugin_code:Model")
    try:
        assert registry.registered()["broken"].origin == "entry point of broken-plugin"
        with pytest.raises(
            IntentError,
            match=r"^model 'broken' \(entry point of broken-plugin .*\): import failed: ImportError: needs libfoo$",
        ):
            registry.resolve("broken")
    finally:
        registry.installed.cache_clear()


def test_an_entry_point_may_not_take_a_built_in_name(tmp_path, monkeypatch):
    _entry_point(tmp_path, monkeypatch, "sasrec", "plugin_faults:PrefixScores")
    try:
        with pytest.raises(
            IntentError, match=r"model 'sasrec': entry point .* takes the name of the built-in"
        ):
            registry.registered()
    finally:
        registry.installed.cache_clear()


def test_a_spec_of_an_entry_points_class_says_it_is_that_model(tmp_path, monkeypatch):
    _entry_point(tmp_path, monkeypatch, "prefix_scores", "plugin_faults:PrefixScores")
    try:
        assert registry.same_model_note("plugin_faults:PrefixScores") == (
            "model plugin_faults:PrefixScores: the entry point of broken-plugin model 'prefix_scores' "
            "(one class, one name: its runs and ranks are prefix_scores's, whichever way it is named)"
        )
        assert registry.same_model_note("prefix_scores") is None
        assert registry.same_model_note("plugin_faults:WrongShapeScores") is None
    finally:
        registry.installed.cache_clear()


def test_intent_models_lists_every_model_with_its_kind_origin_and_defaults(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "repeat_last   history  built-in (models.repeat_last:RepeatLastModel), fits nothing" in out
    assert "gru4rec       vectors  built-in (models.gru4rec:GRU4RecModel)" in out
    assert "encoder=sentence-transformers/all-MiniLM-L6-v2, recency=0.8" in out


# --- through the train and score stages ---


@pytest.fixture(scope="module")
def toy(spark, toy_lake, tmp_path_factory):
    """The shared toy lake (test_split's events, split with seed 4), with its items, and a
    tracking store of this module's own."""
    lake, _ = toy_lake
    if not has_table(spark, lake, S.ITEMS):
        items = [("toy", item, None, None, None, []) for item in "abcdeqyz"]
        write_dataset(spark.createDataFrame(items, S.ITEMS_SCHEMA), lake, S.ITEMS, "toy")
    return lake, f"sqlite:///{tmp_path_factory.mktemp('plugins_mlflow') / 'mlflow.db'}"


def _cli(stage: str, toy, model: str) -> list[str]:
    lake, uri = toy
    return [stage, "--dataset", "toy", "--model", model, "--lake", lake, "--tracking-uri", uri]


def _ranks(spark, lake: str, model: str):
    if not has_table(spark, lake, S.RANKS):
        return []
    return read_table(spark, lake, S.RANKS, "toy").where(F.col(S.MODEL) == model).collect()


def _ranks_frame(spark, lake: str, model: str):
    """The model's ranks as pandas: a row per target (a toy lake's few hundred)."""
    return read_table(spark, lake, S.RANKS, "toy").where(F.col(S.MODEL) == model).toPandas()


def test_a_model_that_fits_nothing_is_scored_without_a_train_run(spark, toy):
    lake, _ = toy
    assert main(_cli("score", toy, "repeat_last")) == 0
    targets = read_table(spark, lake, S.TARGETS, "toy").count()
    assert len(_ranks(spark, lake, "repeat_last")) == targets > 0
    assert main(_cli("score", toy, f"{FAULTS}:PrefixScores")) == 0  # a spec, fitting nothing too
    catalogue = read_table(spark, lake, S.CATALOGUE, "toy")
    index = {(r.split, r.item_id): r.item_index for r in catalogue.collect()}
    placed = read_table(spark, lake, S.TARGETS, "toy").select(S.SPLIT, S.SEQ, S.ITEM_ID)
    rows = {(r.split, r.seq): r for r in placed.collect()}
    ranked = _ranks(spark, lake, "prefix_scores")
    assert len(ranked) == targets
    assert all(r.rank == index[(r.split, rows[(r.split, r.seq)].item_id)] and r.tied == 0 for r in ranked)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "NaNScores",
            r"^intent score: error: toy nan_scores test: NaN or infinite scores .*; nothing written$",
        ),
        (
            "WrongShapeScores",
            r"^intent score: error: toy wrong_shape test: scores of shape \(\d+, 8\), expected \(\d+, 9\)"
            r".*; nothing written \(process [01] of 2\)",
        ),
        (
            "UnloadableSave",
            r"^intent score: error: unloadable_save test: load from its saved folder test/ failed: FileNotFoundError",
        ),
    ],
)
def test_a_bad_plugin_is_one_line_naming_the_model_and_nothing_is_written(spark, toy, capsys, spec, message):
    lake, _ = toy
    if spec == "UnloadableSave":
        assert main(_cli("train", toy, f"{FAULTS}:{spec}")) == 0
    capsys.readouterr()
    processes = ["--processes", "2"] if spec == "WrongShapeScores" else []  # a process's own error, once
    assert main([*_cli("score", toy, f"{FAULTS}:{spec}"), *processes]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("intent score: error:")]
    assert len(errors) == 1 and "Traceback" not in err, err  # progress lines, then the one error
    assert re.match(message, errors[0]), errors[0]
    name = registry.resolve(f"{FAULTS}:{spec}").name
    assert _ranks(spark, lake, name) == []
    assert not (Path(lake) / "_staging" / "ranks" / "toy" / name).exists()


def test_a_plugins_own_bug_shows_its_frames_saves_its_traceback_and_verbose_prints_it_whole(
    spark, toy, capsys, monkeypatch
):
    lake, _ = toy
    raised = _line_of('raise RuntimeError("boom: my own bug inside fit")')
    saved = Path(lake).resolve() / "_stages" / "toy.fit_raises.traceback.txt"
    assert main(_cli("train", toy, f"{FAULTS}:FitRaises")) == 2
    err = capsys.readouterr().err.splitlines()
    errors = [i for i, line in enumerate(err) if line.startswith("intent train: error:")]
    assert len(errors) == 1
    assert err[errors[0]] == (
        "intent train: error: toy fit_raises test: fit failed: RuntimeError: boom: my own bug inside fit "
        f"(plugin_faults.py line {raised}, in _count); its traceback is in {saved}"
    )
    assert err[errors[0] + 1 :] == [
        f'  File "{PLUGIN_FAULTS_FILE}", line {_line_of("return self._count(first)")}, in fit',
        "    return self._count(first)",
        f'  File "{PLUGIN_FAULTS_FILE}", line {raised}, in _count',
        '    raise RuntimeError("boom: my own bug inside fit")',
    ]
    text = saved.read_text()
    assert "Traceback (most recent call last):" in text and "intent_spark/train/build.py" in text
    assert text.rstrip().endswith("RuntimeError: boom: my own bug inside fit")

    monkeypatch.setenv("INTENT_VERBOSE", "0")  # restored after: --verbose sets it for the process
    assert main(["--verbose", *_cli("score", toy, f"{FAULTS}:ScoresRaise")]) == 2
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if line.startswith("intent score: error:"))
    scored = _line_of("return self.table[contexts]")
    assert line.startswith(
        "intent score: error: toy scores_raise test: scoring failed: AttributeError: "
        f"'ScoresRaise' object has no attribute 'table' (plugin_faults.py line {scored}, in scores)"
    ), line
    assert "Traceback (most recent call last):" in err and "intent_spark/train/ranker.py" in err
    assert _ranks(spark, lake, "scores_raise") == []


def test_an_unknown_model_on_the_command_line_lists_the_registered_ones(toy, capsys):
    assert main(_cli("train", toy, "bert4rec")) == 2
    assert "unknown model 'bert4rec' (registered: popularity, repeat_last, sasrec" in capsys.readouterr().err


# --- the example plug-in, installed as a user would ---

EXAMPLE = REPO_ROOT / "examples" / "cooccurrence"


@pytest.fixture(scope="module")
def installed_example(tmp_path_factory):
    """``pip install examples/cooccurrence`` into this environment (once; a no-op after), built
    from a copy so that no build folder is left in the repository."""
    import importlib.metadata
    import shutil
    import subprocess

    try:
        importlib.metadata.distribution("intent-cooccurrence")
    except importlib.metadata.PackageNotFoundError:
        source = shutil.copytree(EXAMPLE, tmp_path_factory.mktemp("example") / "cooccurrence")
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(source)],
            check=True,
        )
    registry.installed.cache_clear()
    yield
    registry.installed.cache_clear()


def test_the_example_plugin_runs_by_name_through_every_stage(
    spark, installed_example, toy, reference_run, tmp_path
):
    """``intent run`` with it beside popularity and a plug-in written from the docs alone
    (``docs_plugin.py``, by ``module:Class``) on a copy of the reference run (a generated
    source: its ingest, split and popularity are skipped), then ``intent train``, ``score`` and
    ``evaluate`` by name on the toy lake."""
    assert registry.registered()["cooccurrence"].origin == "entry point of intent-cooccurrence"
    copy_reference_run(reference_run, tmp_path / "work")
    conf = tmp_path / "run.yaml"
    conf.write_text(
        textwrap.dedent(
            f"""\
            workdir: {tmp_path / "work"}
            seed: 3
            datasets:
              - {{name: hm, events: 3000}}
            models: [popularity, cooccurrence, "docs_plugin:ContextBag"]
            """
        )
    )
    assert main(["run", "--conf", str(conf)]) == 0
    lake = str(tmp_path / "work" / "lake")
    targets = read_table(spark, lake, S.TARGETS, "hm").count()
    for model in ("cooccurrence", "context_bag"):
        ranked = read_table(spark, lake, S.RANKS, "hm").where(F.col(S.MODEL) == model).count()
        assert ranked == targets > 0, model
    report = (tmp_path / "work" / "report" / "report.md").read_text()
    assert "cooccurrence" in report and "popularity" in report and "context_bag" in report

    toy_lake, _ = toy
    assert main(_cli("train", toy, "cooccurrence")) == 0
    assert main(_cli("score", toy, "cooccurrence")) == 0
    assert main(["evaluate", "--dataset", "toy", "--lake", toy_lake, "--tracking-uri", toy[1]]) == 0
    assert (
        len(_ranks(spark, toy_lake, "cooccurrence")) == read_table(spark, toy_lake, S.TARGETS, "toy").count()
    )
    metrics = read_table(spark, toy_lake, S.METRICS_TABLE, "toy").where(F.col(S.MODEL) == "cooccurrence")
    cells = read_table(spark, toy_lake, S.TARGETS, "toy").select(S.SPLIT, S.CELL).distinct().count()
    assert metrics.count() == cells * (5 * 6 + 1)  # five metrics at six k, and the tie rate
    # NDCG@10 of each cell recomputed by hand from the plug-in's ranks: per user, then over users
    ranks = _ranks_frame(spark, toy_lake, "cooccurrence")
    ranks["gain"] = np.where(ranks[S.RANK] <= 10, 1.0 / np.log2(1.0 + ranks[S.RANK]), 0.0)
    by_user = ranks.groupby([S.SPLIT, S.CELL, S.USER_ID])["gain"].mean()
    expected = by_user.groupby(level=[0, 1]).mean()
    stored = {
        (r[S.SPLIT], r[S.CELL]): r.value
        for r in metrics.where((F.col("metric") == "ndcg") & (F.col("k") == 10)).collect()  # a row per cell
    }
    assert stored.keys() == set(expected.index)
    for key, value in expected.items():
        assert abs(stored[key] - value) < 1e-12, key
