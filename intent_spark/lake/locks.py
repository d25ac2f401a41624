"""One writer per dataset of a lake at a time.

Delta's optimistic concurrency makes each table commit atomic, and two writers of different
datasets commit side by side (each replaces only its own ``dataset`` partition). It cannot make
a stage atomic: a split writes ``holdout``, ``splits`` and ``targets`` in three commits, and two
splits of one dataset with different seeds interleaved would leave one's holdout beside the
other's targets, every commit valid. So every command that writes a dataset's tables first
takes that dataset's lock, a file ``LAKE/_locks/<source>.json`` created atomically (written
aside, then hard-linked into place: it exists whole or not at all; where the filesystem refuses
hard links, by an exclusive create). A second writer stops at
once with one line naming the first (its command, process, host and start). A lock whose
process is gone (same host, no such process, or one started later) is taken over.

Variants (``amazon_hk.seed1``, ``amazon_hk.origin2``) lock their source: they read its events
and are written by the same runs. A lake on an object store (``s3://``) has no atomic create;
there, as on a scheduler, runs of one dataset must be serialized by the job (the bundle's
``max_concurrent_runs: 1``).
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from intent_spark.core.datasets import parse_dataset
from intent_spark.core.errors import IntentError

LOCKS = "_locks"


def _local_root(lake: str) -> Path | None:
    if lake.startswith("file://"):
        return Path(lake.removeprefix("file://"))
    return None if "://" in lake else Path(lake)


def _started(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def pid_alive(pid: int) -> bool:
    """Whether a process of this id runs on this machine (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _alive(holder: dict[str, Any]) -> bool:
    if holder.get("host") != socket.gethostname():
        return True  # another machine's process: nothing here can tell
    pid = int(holder.get("pid", 0))
    if not pid_alive(pid):
        return False
    started = holder.get("process_started")
    return started is None or _started(pid) in (None, started)


def describe(holder: dict[str, Any]) -> str:
    return (
        f"`{holder.get('command', '?')}` (pid {holder.get('pid', '?')} on {holder.get('host', '?')}, "
        f"since {holder.get('started', '?')})"
    )


def _link_or_create(aside: Path, path: Path) -> None:
    """Put ``aside``'s content at ``path`` unless a file is there (FileExistsError): by hard link,
    whole at once; on a filesystem that refuses hard links (some FUSE and network mounts) by an
    exclusive create, which a reader may catch half-written (it then reads no holder and retries)."""
    try:
        os.link(aside, path)
    except FileExistsError:
        raise
    except OSError:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as out:
            out.write(aside.read_bytes())


def _take(path: Path, me: dict[str, Any]) -> dict[str, Any] | None:
    """Create the lock file whole; None when taken, else the current holder's record."""
    aside = path.with_name(f".{path.name}.{os.getpid()}")
    aside.write_text(json.dumps(me))
    try:
        _link_or_create(aside, path)
        return None
    except FileExistsError:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {}  # removed or being replaced this instant: try again
    finally:
        aside.unlink(missing_ok=True)


def _release_stale(path: Path, holder: dict[str, Any]) -> bool:
    """Move a dead holder's lock aside (one rename: of two processes taking it over, one wins).
    Should the file moved be a newer holder's, it goes back."""
    aside = path.with_name(f".{path.name}.stale.{os.getpid()}")
    try:
        path.rename(aside)
    except FileNotFoundError:
        return False
    try:
        if json.loads(aside.read_text()) == holder:
            return True
        with suppress(FileExistsError):
            _link_or_create(aside, path)
        return False
    finally:
        aside.unlink(missing_ok=True)


@contextmanager
def dataset_lock(
    lake: str, datasets: Iterable[str], command: str, progress: Callable[[str], None] = lambda _: None
) -> Iterator[None]:
    """Hold the write lock of every source of ``datasets`` inside the block (all or none)."""
    root = _local_root(lake)
    sources = sorted({parse_dataset(d).source for d in datasets})
    if root is None or not sources:
        yield
        return
    folder = root / LOCKS
    folder.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    me = {
        "command": command,
        "pid": pid,
        "process_started": _started(pid),
        "host": socket.gethostname(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    held: list[Path] = []
    try:
        for source in sources:
            path = folder / f"{source}.json"
            for _ in range(20):
                holder = _take(path, me)
                if holder is None:
                    held.append(path)
                    break
                if holder and _alive(holder):
                    raise IntentError(
                        f"{lake}: {source} is being written by {describe(holder)}; this command stops "
                        f"rather than mix its tables with that one's (delete {path} if that process is gone)"
                    )
                if holder and _release_stale(path, holder):
                    progress(f"{source}: took over the lock of {describe(holder)}, which is gone")
                time.sleep(0.05)
            else:
                raise IntentError(f"{path}: could not take the lock (it kept changing hands)")
        yield
    finally:
        for path in held:
            with suppress(FileNotFoundError):
                path.unlink()
