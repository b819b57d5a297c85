"""File locks shared by processes that build into, or load from, one folder."""
import contextlib
import os

__all__ = ["file_lock"]


@contextlib.contextmanager
def file_lock(path: str, exclusive: bool = True):
    """Hold a lock on ``path`` (exclusive, or shared when ``exclusive`` is false) through the file
    ``path + ".lock"`` beside it, so that ``path`` itself may be replaced while the lock is held.
    On a file system without locks (some parallel ones) this goes on unlocked."""
    import fcntl
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            locked = True
        except OSError:
            locked = False
        try:
            yield
        finally:
            if locked:
                fcntl.flock(f, fcntl.LOCK_UN)
