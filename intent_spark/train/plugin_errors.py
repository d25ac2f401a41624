"""A plug-in's own exception as the author needs it: one line naming the model, the call and
the plug-in's file and line; the plug-in's frames under it; the whole traceback with
``--verbose`` and in a file beside the dataset's stage log."""

from __future__ import annotations

import functools
import inspect
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from intent_spark.core.errors import PluginError
from intent_spark.lake.context import Lake


def plugin_sources(cls: type) -> list[str]:
    """Where a model's code lives: the folder of each package its classes come from (the file
    of a module outside any package), the framework's base classes left out."""
    roots = []
    for klass in cls.__mro__:
        if klass.__module__ in ("builtins", "intent_spark.plugin.interface"):
            continue
        module = sys.modules.get(klass.__module__)
        try:
            source = Path(inspect.getfile(module)).resolve() if module else None
        except TypeError:
            source = None
        if source is None:
            continue
        top = sys.modules.get(klass.__module__.split(".")[0])
        if "." in klass.__module__ and top is not None and getattr(top, "__file__", None):
            root = str(Path(top.__file__).resolve().parent)  # type: ignore[arg-type]
        else:
            root = str(source)
        if root not in roots:
            roots.append(root)
    return roots


def author_frames(exc: BaseException, cls: type) -> list[traceback.FrameSummary]:
    """The frames of ``exc``'s traceback in the plug-in's own code (the last frame when none is)."""
    frames = traceback.extract_tb(exc.__traceback__)
    roots = plugin_sources(cls)
    own = [f for f in frames if any(str(Path(f.filename).resolve()).startswith(r) for r in roots)]
    return own or frames[-1:]


def plugin_error(where: str, what: str, exc: BaseException, cls: type) -> PluginError:
    """``exc``, raised by a plug-in's ``what`` (fit, save, load, scores...), as one line with its
    last own frame, the plug-in's frames and the whole traceback."""
    frames = author_frames(exc, cls)
    last = frames[-1] if frames else None
    at = f" ({Path(last.filename).name} line {last.lineno}, in {last.name})" if last else ""
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    message = f"{where}: {what} failed: {type(exc).__name__}: {first}{at}"
    shown = "\n".join(
        f'  File "{f.filename}", line {f.lineno}, in {f.name}' + (f"\n    {f.line}" if f.line else "")
        for f in frames
    )
    whole = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return PluginError(message, getattr(cls, "name", "") or cls.__name__, shown, whole)


def traceback_file(lake: Lake, dataset: str, model: str) -> str:
    """Beside the dataset's stage log (``LAKE/_stages/DATASET.json``)."""
    root = lake.root if "://" in lake.root else str(Path(lake.root).resolve())
    return f"{root.rstrip('/')}/_stages/{dataset}.{model}.traceback.txt"


@contextmanager
def tracebacks_saved(lake: Lake, dataset: str) -> Iterator[None]:
    """A plug-in's exception in the block has its whole traceback written beside the stage
    log, and its line names the file."""
    try:
        yield
    except PluginError as error:
        if error.saved is None:
            from intent_spark.lake.files import filesystem

            path = traceback_file(lake, dataset, error.model)
            try:
                fs, inside = filesystem(path)
                fs.create_dir(inside.rsplit("/", 1)[0], recursive=True)
                with fs.open_output_stream(inside) as sink:
                    sink.write(f"{error.message}\n\n{error.traceback}".encode())
                error.saved = path
            except OSError:  # a lake that takes no file still gets the line and the frames
                pass
        raise


Stage = TypeVar("Stage", bound=Callable[..., Any])


def saves_tracebacks(stage: Stage) -> Stage:
    """A stage ``stage(lake, dataset, ...)`` (``lake`` a ``lake.context.Lake``) whose plug-in
    exceptions are saved beside the dataset's stage log (``tracebacks_saved``)."""

    @functools.wraps(stage)
    def wrapper(lake: Lake, dataset: str, *args: Any, **kwargs: Any) -> Any:
        with tracebacks_saved(lake, dataset):
            return stage(lake, dataset, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def print_plugin_frames(exc: BaseException) -> None:
    """Under a plug-in's one-line error, its own frames (file, line, code); with ``--verbose``
    the whole traceback."""
    while exc is not None and not isinstance(exc, PluginError):
        exc = exc.__cause__  # type: ignore[assignment]
    if exc is None:
        return
    if os.environ.get("INTENT_VERBOSE") == "1":
        print(exc.traceback.rstrip("\n"), file=sys.stderr)
    elif exc.frames:
        print(exc.frames, file=sys.stderr)
