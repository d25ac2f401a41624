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
and are written by the same runs. A lake on an object store (``s3a://``, ``s3://``) has neither
hard links nor rename; there the lock is an object created by a conditional write
(``If-None-Match: *``: the store creates it only if no object has that key), and a dead
holder's lock is deleted only if it is still that holder's (``If-Match`` on its ETag). A store
that refuses conditional writes takes no lock, and the command says that runs of one dataset
must then be serialised by the job (the bundle's ``max_concurrent_runs: 1``).
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

from intent_spark.core.datasets import DatasetRef
from intent_spark.core.errors import IntentError
from intent_spark.core.progress import Progress, silent

LOCKS = "_locks"
UNLOCKED_STORE = (
    "{root}: no lock taken ({why}); runs of one dataset of this lake must be serialised by "
    "whoever starts them (one job at a time: databricks.yml's max_concurrent_runs: 1)"
)


def _local_root(root: str) -> Path | None:
    if root.startswith("file://"):
        return Path(root.removeprefix("file://"))
    return None if "://" in root else Path(root)


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


class _FolderLocks:
    """Lock files in ``LAKE/_locks`` of a local (or FUSE) folder."""

    def __init__(self, root: Path) -> None:
        self.folder = root / LOCKS
        self.folder.mkdir(parents=True, exist_ok=True)

    def where(self, source: str) -> str:
        return str(self.folder / f"{source}.json")

    def take(self, source: str, me: dict[str, Any]) -> dict[str, Any] | None:
        return _take(self.folder / f"{source}.json", me)

    def release_stale(self, source: str, holder: dict[str, Any]) -> bool:
        return _release_stale(self.folder / f"{source}.json", holder)

    def release(self, source: str) -> None:
        with suppress(FileNotFoundError):
            (self.folder / f"{source}.json").unlink()


class _StoreLocks:
    """Lock objects ``LAKE/_locks/<source>.json`` on an S3-API store, by conditional writes."""

    def __init__(self, root: str) -> None:
        import boto3
        from botocore.config import Config

        from intent_spark.lake.files import ENDPOINT_ENV

        bucket, _, prefix = root.split("://", 1)[1].partition("/")
        self.bucket, self.prefix = bucket, f"{prefix.strip('/')}/{LOCKS}/".lstrip("/")
        self.root = root
        endpoint = os.environ.get(ENDPOINT_ENV) or None
        self.client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
            config=Config(
                s3={"addressing_style": "path"} if endpoint else {},
                connect_timeout=5,
                read_timeout=30,
                retries={"max_attempts": 3},
            ),
        )
        self.tags: dict[str, str] = {}  # the ETag of each lock read or written here

    def where(self, source: str) -> str:
        return f"{self.root.rstrip('/')}/{LOCKS}/{source}.json"

    def take(self, source: str, me: dict[str, Any]) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        key = self.prefix + f"{source}.json"
        try:
            written = self.client.put_object(
                Bucket=self.bucket, Key=key, Body=json.dumps(me).encode(), IfNoneMatch="*"
            )
            self.tags[source] = written["ETag"]
            return None
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in (
                "PreconditionFailed",
                "ConditionalRequestConflict",
            ):
                raise
        try:
            found = self.client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchKey":
                return {}  # released this instant: try again
            raise
        self.tags[source] = found["ETag"]
        try:
            return json.loads(found["Body"].read())
        except ValueError:
            return {}

    def release_stale(self, source: str, holder: dict[str, Any]) -> bool:
        """Delete the dead holder's object only if it is still the one read (its ETag)."""
        from botocore.exceptions import ClientError

        try:
            self.client.delete_object(
                Bucket=self.bucket, Key=self.prefix + f"{source}.json", IfMatch=self.tags[source]
            )
            return True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "NoSuchKey"):
                return False
            raise

    def release(self, source: str) -> None:
        """Delete this writer's lock; where the store cannot be reached the lock stays, and the
        next writer takes it over (its process is gone)."""
        from botocore.exceptions import BotoCoreError, ClientError

        with suppress(BotoCoreError, ClientError, KeyError):
            self.client.delete_object(
                Bucket=self.bucket, Key=self.prefix + f"{source}.json", IfMatch=self.tags[source]
            )


def _store_locks(root: str, progress: Callable[[str], None]) -> _StoreLocks | None:
    """The store's lock objects, or None (with the line saying so) where it cannot hold one."""
    try:
        locks = _StoreLocks(root)
    except ImportError:
        progress(
            UNLOCKED_STORE.format(root=root, why="boto3 is not installed: pip install 'intent-spark[store]'")
        )
        return None
    return locks


def _refused_condition(exc: BaseException) -> bool:
    """A store that does not implement conditional writes (an older S3-API server)."""
    response = getattr(exc, "response", None) or {}
    code = response.get("Error", {}).get("Code", "")
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code == "NotImplemented" or status == 501


def _store_failure(root: str, source: str, exc: BaseException) -> IntentError:
    """A store error while taking a lock, as one line naming the lock's URI."""
    from intent_spark.lake.files import ENDPOINT_ENV

    code = (getattr(exc, "response", None) or {}).get("Error", {}).get("Code", "")
    where = f"{root.rstrip('/')}/{LOCKS}/{source}.json"
    if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
        why = "access denied (the credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
    elif code == "NoSuchBucket":
        why = "no such bucket"
    elif code:
        why = f"the store refused the lock ({code})"
    else:
        why = f"the store does not answer at {os.environ.get(ENDPOINT_ENV) or 'AWS'}"
    return IntentError(f"{where}: {why}; the command stopped before writing anything")


@contextmanager
def dataset_lock(
    root: str, datasets: Iterable[DatasetRef], command: str, progress: Progress = silent
) -> Iterator[None]:
    """Hold the write lock of every source of ``datasets`` inside the block (all or none)."""
    from intent_spark.lake.files import on_store

    sources = sorted({d.source for d in datasets})
    folder = _local_root(root)
    locks: _FolderLocks | _StoreLocks | None = None
    if sources and folder is not None:
        locks = _FolderLocks(folder)
    elif sources and on_store(root):
        locks = _store_locks(root, progress)
    if locks is None:
        yield
        return
    pid = os.getpid()
    me = {
        "command": command,
        "pid": pid,
        "process_started": _started(pid),
        "host": socket.gethostname(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    held: list[str] = []
    try:
        for source in sources:
            for _ in range(20):
                try:
                    holder = locks.take(source, me)
                except Exception as exc:
                    if isinstance(locks, _FolderLocks):
                        raise
                    if _refused_condition(exc):
                        progress(UNLOCKED_STORE.format(root=root, why="the store refuses conditional writes"))
                        break
                    raise _store_failure(root, source, exc) from exc
                if holder is None:
                    held.append(source)
                    break
                if holder and _alive(holder):
                    raise IntentError(
                        f"{root}: {source} is being written by {describe(holder)}; this command stops "
                        f"rather than mix its tables with that one's (delete {locks.where(source)} if that process is gone)"
                    )
                if holder and locks.release_stale(source, holder):
                    progress(f"{source}: took over the lock of {describe(holder)}, which is gone")
                time.sleep(0.05)
            else:
                raise IntentError(f"{locks.where(source)}: could not take the lock (it kept changing hands)")
        yield
    finally:
        for source in held:
            locks.release(source)
