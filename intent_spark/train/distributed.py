"""Training and scoring over several processes with Spark's own TorchDistributor.

On a local master the processes run on the driver's machine (CPU processes, gloo); on a cluster
they are barrier tasks on the executors (one GPU each where there are GPUs, nccl). Nothing of a
model changes: ``TrainingData`` hands each process its own shard of
``train_sequences`` (``cur_shard``/``shard_count``) and ``train_steps`` averages the gradients
through DistributedDataParallel; scoring gives each process every N-th user block (a user's
targets never split) and its own part of the staged ranks, which the stage commits once.

The processes share only the lake's filesystem: rank 0 leaves the saved model and the numbers
to log under the lake's ``_staging`` (the stage logs them to MLflow once), and a process that
fails leaves its own one-line error there for the stage to report.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from intent_spark.core.conf import environment
from intent_spark.core.errors import IntentError
from intent_spark.lake.files import filesystem

ERRORS = "errors"


def run_processes(
    spark: SparkSession, processes: int, work: Callable[..., None], staging: str, where: str, *args: Any
) -> None:
    """``work(*args)`` in ``processes`` processes through TorchDistributor; a failed process
    fails the stage with its own message (from ``staging/errors``)."""
    import logging

    from pyspark.ml.torch.distributor import TorchDistributor

    local = spark.sparkContext.master.startswith("local")
    use_gpu = _gpus_for(spark, local)
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # DDP's C++ notices, once per process
    distributor = TorchDistributor(num_processes=processes, local_mode=local, use_gpu=use_gpu)
    distributor.logger.setLevel(logging.WARNING)  # its start and finish lines; ours say more
    before = os.environ.get("PYTHONPATH")
    # a module:Class spec the driver can import, the processes can import too
    importable = [p for p in sys.path if p and os.path.isdir(p)] + ([before] if before else [])
    with environment("PYTHONPATH", os.pathsep.join(importable) if local else None):
        try:
            distributor.run(_guarded, work, staging, where, *args)
        except Exception as exc:  # noqa: BLE001 - a process's own error, read back below
            messages = _errors(staging)
            if messages:
                raise IntentError(messages[0]) from None
            raise IntentError(f"{where}: the processes failed: {str(exc).splitlines()[0][:300]}") from exc


def _gpus_for(spark: SparkSession, local: bool) -> bool:
    """GPUs as Spark schedules them: the driver's ``gpu`` resource in local mode
    (``spark.driver.resource.gpu.amount`` and its discovery script), the executors' on a
    cluster. Without them the processes run on the CPU, as TorchDistributor requires."""
    if local:
        return "gpu" in spark.sparkContext.resources
    return bool(spark.sparkContext.getConf().get("spark.executor.resource.gpu.amount", ""))


def process_rank() -> tuple[int, int]:
    """This process's rank and the number of processes (torchrun's environment)."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def process_device():
    """This process's device: its own GPU (torchrun's LOCAL_RANK) where it was given one."""
    import torch

    if torch.cuda.is_available() and os.environ.get("CUDA_VISIBLE_DEVICES", "") != "":
        device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}")
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def _guarded(work: Callable[..., None], staging: str, where: str, *args: Any) -> None:
    """One process's work; its failure is written as one line before the process exits: the
    work's own message (which names the model and split) and the process."""
    import torch

    rank, world = process_rank()
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))  # processes share the cores
    try:
        work(*args)
    except Exception as exc:
        text = error_line(exc, where)
        write_text(f"{staging}/{ERRORS}/rank-{rank:05d}.txt", f"{text[:400]} (process {rank} of {world})")
        raise


def error_line(exc: Exception, where: str) -> str:
    """A process's failure in one line: an IntentError's own first line (it names the model and
    split), any other exception's type and first line after ``where``."""
    line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return line if isinstance(exc, IntentError) else f"{where}: {type(exc).__name__}: {line}"


def _errors(staging: str) -> list[str]:
    import pyarrow.fs as pafs

    fs, path = filesystem(f"{staging}/{ERRORS}")
    found = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    messages = []
    for info in sorted(found, key=lambda f: f.path):
        with fs.open_input_stream(info.path) as stream:
            messages.append(stream.read().decode("utf-8").strip())
    return messages


def write_text(path: str, text: str) -> None:
    fs, inside = filesystem(path)
    fs.create_dir(inside.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(inside) as sink:
        sink.write(text.encode("utf-8"))


def read_json(path: str) -> dict[str, Any]:
    fs, inside = filesystem(path)
    with fs.open_input_stream(inside) as stream:
        return json.loads(stream.read().decode("utf-8"))


def copy_folder(source: str, destination: str) -> None:
    """Every file of a folder to another, across filesystems (a local temp folder and the lake)."""
    import pyarrow.fs as pafs

    src_fs, src = filesystem(source)
    dst_fs, dst = filesystem(destination)
    dst_fs.create_dir(dst, recursive=True)
    pafs.copy_files(src, dst, source_filesystem=src_fs, destination_filesystem=dst_fs)


def with_texts(catalogue, texts: list[str]):
    from dataclasses import replace

    return replace(catalogue, text_loader=lambda: texts)


def say(where: str, line: str) -> None:
    print(f"{where}: {line}", flush=True)  # TorchDistributor copies a process's output to the stage's


def silent(line: str) -> None:
    """Ranks other than 0 stay quiet: one progress line per step, not N."""


def staged_counts(staging: str) -> list[dict[str, Any]]:
    """Every scoring process's targets and seconds per split."""
    import pyarrow.fs as pafs

    fs, path = filesystem(f"{staging}/counts")
    found = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return [
        read_json(f"{staging}/counts/{info.base_name}") for info in sorted(found, key=lambda f: f.base_name)
    ]
