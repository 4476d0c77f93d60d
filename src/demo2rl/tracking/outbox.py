"""The buffered sender: a job's tracking calls go out in order from one background thread.

Tracking trouble never loses training: unless ``tracking.fail_on_error`` is set, a call that
fails for a reason a retry can cure (server unreachable or timing out, 5xx, a locked store, a
SQLite store whose disk is full) stays queued with every later call and is retried with
exponential backoff; the job says so in its log. At its end a job waits up to
:data:`FLUSH_GRACE_S` for the store, then finishes without the unsent tracking data, naming the
last error.
"""

from __future__ import annotations

import collections
import logging
import random
import threading
import time
from collections.abc import Callable

from demo2rl.tracking.store import is_permanent, one_line

RESULT_NEUTRAL = True
"""Tracking cannot change a result: no code fingerprint covers this module."""

log = logging.getLogger(__package__)

RETRY_MIN_S = 1.0
"""First delay before a failed tracking call is retried; it doubles per failure up to..."""
RETRY_MAX_S = 60.0
FLUSH_GRACE_S = 30.0
"""How long a finishing job keeps retrying unsent tracking calls before it gives up on them."""
FLUSH_RETRY_S = 2.0
"""The longest delay between retries while a job waits for its tracking calls to go out."""
_jitter = random.Random()  # not the global generator: tracking must never touch results


def describe(error: BaseException) -> str:
    """``error`` on one line for the log, led by its root cause when it wraps one: MLflow wraps
    SQLAlchemy's error, which wraps sqlite3's ("database or disk is full", "database is
    locked"), in a message of SQL statement and values that :func:`one_line` would cut."""
    root = error
    while root.__cause__ is not None and root.__cause__ is not root:
        root = root.__cause__
    if root is error:
        return one_line(error)
    cause = f"{type(root).__module__}.{type(root).__qualname__}: {one_line(root, 150)}"
    return f"{cause.removeprefix('builtins.')}; {one_line(error, 150)}"


class RunMissing(Exception):
    """A call for a run whose creation the store rejected: dropped, counted, not logged again."""


class Outbox:
    """Sends tracking calls in order from one background thread: the job never waits on the store.

    MLflow's own asynchronous logging (``synchronous=False``) sends batches from a pool of
    threads and drops one that fails. Here a single sender keeps the calls in order, and a call
    that fails for a reason a retry can cure stays at the head of the queue, with everything
    after it, and is retried with exponential backoff (1 s doubling to 60 s; at most 2 s while
    the job waits for them at its end); the job's log says so. A call the store rejects (4xx)
    is logged and dropped. With ``fail_on_error`` the first failure is raised in the job's
    thread, at its next tracking call or :meth:`flush`.
    """

    def __init__(self, fail_on_error: bool = False) -> None:
        self.fail_on_error = fail_on_error
        self.pending: collections.deque[tuple[str, Callable[[], object]]] = collections.deque()
        self.calls: collections.Counter[str] = collections.Counter()
        self.dropped = 0
        self.error: Exception | None = None
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._failures = 0
        self._retry_at = 0.0
        self._down_since: float | None = None
        self._last_error: Exception | None = None
        self._flushing = False

    def send(self, name: str, call: Callable[[], object]) -> None:
        """Queue ``call`` for the sender (raises the first failure when ``fail_on_error``)."""
        with self._cond:
            self._raise_error()
            self.pending.append((name, call))
            if self._thread is None:
                self._thread = threading.Thread(target=self._send_loop, name="mlflow-outbox")
                self._thread.daemon = True
                self._thread.start()
            self._cond.notify_all()

    def flush(self, grace: float | None = None) -> bool:
        """Wait until every queued call is sent, for at most ``grace`` s (default
        :data:`FLUSH_GRACE_S`), then give up on the rest; True if nothing was given up."""
        with self._cond:
            deadline = time.monotonic() + (FLUSH_GRACE_S if grace is None else grace)
            self._flushing = True  # the job waits now: retry sooner than the backoff would
            self._retry_at = min(self._retry_at, time.monotonic() + FLUSH_RETRY_S)
            self._cond.notify_all()
            while self.pending and self.error is None and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            self._flushing = False
            self._raise_error()
            if not self.pending:
                return True
            log.error(
                "MLflow tracking unreachable for %.0f s (last error: %s): giving up on %d "
                "tracking calls (this job's outputs are not affected)",
                time.monotonic() - (self._down_since or time.monotonic()),
                describe(self._last_error) if self._last_error else "none yet",
                len(self.pending),
            )
            self.dropped += len(self.pending)
            self.pending.clear()
            return False

    def close(self, grace: float | None = None) -> bool:
        """:meth:`flush`, then let the sender thread end."""
        try:
            return self.flush(grace)
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()

    def _raise_error(self) -> None:
        """Raise the failure the sender recorded (``fail_on_error``) in the job's thread."""
        if self.error is not None:
            raise self.error

    def _send_loop(self) -> None:
        """The sender thread: send the head call when no backoff delay holds it, until closed."""
        while True:
            with self._cond:
                while not self.pending or time.monotonic() < self._retry_at:
                    if self._closed and not self.pending:
                        return
                    wait = self._retry_at - time.monotonic() if self.pending else None
                    self._cond.wait(wait)
                item = self.pending[0]
            try:
                item[1]()
                error = None
            except Exception as err:
                error = err
            with self._cond:
                self._settle(item, error)
                self._cond.notify_all()

    def _settle(self, item: tuple[str, Callable[[], object]], error: Exception | None) -> None:
        """The outcome of sending the head call ``item`` (gone if a flush gave up on it)."""
        name = item[0]
        at_head = bool(self.pending) and self.pending[0] is item
        if error is None:
            if at_head:
                self.pending.popleft()
            self.calls[name] += 1
            if self._down_since is not None:
                log.warning(
                    "MLflow tracking reachable again after %.0f s; sending %d buffered calls",
                    time.monotonic() - self._down_since,
                    len(self.pending),
                )
                self._down_since, self._failures, self._retry_at = None, 0, 0.0
        elif isinstance(error, RunMissing):  # the rejection of its run was logged already
            if at_head:
                self.pending.popleft()
            self.dropped += 1
        elif self.fail_on_error:
            self.error = error
            self.dropped += len(self.pending)
            self.pending.clear()
        elif is_permanent(error):
            if at_head:
                self.pending.popleft()
            self.dropped += 1
            log.error("MLflow rejected %s, dropped it: %s", name, one_line(error))
        else:
            self._backoff(name, error)

    def _backoff(self, name: str, error: Exception) -> None:
        """Hold the queue for the next retry of the failed head call, and say so in the log
        (the first failure of an outage says training continues)."""
        now = time.monotonic()
        self._last_error = error
        longest = FLUSH_RETRY_S if self._flushing else RETRY_MAX_S
        delay = min(longest, RETRY_MIN_S * 2**self._failures) * _jitter.uniform(1.0, 1.1)
        self._failures += 1
        self._retry_at = now + delay
        if self._down_since is None:
            self._down_since = now
            log.warning(
                "MLflow tracking failed (%s: %s); training continues, tracking calls are "
                "buffered and retried with backoff (next try in %.0f s)",
                name,
                describe(error),
                delay,
            )
        else:
            log.warning(
                "MLflow tracking still unreachable after %.0f s; %d calls buffered, "
                "next try in %.0f s",
                now - self._down_since,
                len(self.pending),
                delay,
            )
