"""Files written so that a crash leaves each one whole or absent.

Every writer of the package that replaces a file (the Workload Reservoir's partitions, execution
configurations, the Airflow cycle's reports, the serving log's journal and parts) writes a hidden
temporary file, syncs it, renames it into place and syncs the directory: after a crash of the
process or of the machine, the file is the old one or the complete new one. A process killed
mid-write leaves its temporary file; the writer that next holds the same lock removes it
(:func:`remove_unfinished`).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: The names of temporary files :func:`atomic` writes: ``.<name>.<random>.tmp``.
UNFINISHED = ".*.tmp"


def fsync_dir(directory: Path) -> None:
    """Make the renames in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic(path: Path, tmp_dir: Path | None = None) -> Iterator[Path]:
    """Yield a temporary path to write ``path``'s new content to: hidden, in ``tmp_dir`` (on the
    same file system) or else beside ``path``. When the block succeeds the file is synced, renamed
    over ``path`` (atomic on POSIX) and the directory synced; when it fails the file is removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    where = tmp_dir if tmp_dir is not None else path.parent
    while True:
        tmp = where / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            # Mode 0666 less the umask, as a file opened for writing gets (mkstemp's 0600 would
            # hide a published configuration or a log part from the other users that read it).
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            break
        except FileExistsError:
            continue
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def remove_unfinished(directory: Path) -> int:
    """Remove the temporary files a killed writer left in ``directory``; returns how many. Call it
    only while holding the lock of whatever writes there, so no temporary file is in use."""
    gone = 0
    for f in directory.glob(UNFINISHED):
        f.unlink(missing_ok=True)
        gone += 1
    return gone
