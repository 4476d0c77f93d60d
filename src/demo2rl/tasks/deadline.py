"""Time limits on user code: a call of a task's env or expert that takes longer than
``task.timeout_s`` raises :class:`UserCodeTimeout`, naming the call, instead of hanging a job.

In-process calls (:func:`limit`) are interrupted by ``SIGALRM``: ``signal.setitimer`` arms a
real-time timer around the call, and the handler raises in the main thread as soon as the
interpreter runs again. What follows from that:

* only the main thread can be limited: in any other thread :func:`limit` limits nothing;
* C code that never returns to the interpreter (a native loop that neither releases nor checks
  for signals) cannot be interrupted: the error comes when it returns, if ever. A blocking system
  call such as ``time.sleep`` is interrupted;
* an interrupted env or expert is left half way through its call: the caller fails the job and
  never uses it again;
* the previous ``SIGALRM`` handler and timer are restored after the call (an outer timer is
  re-armed with what is left of it).

Calls in worker processes (:class:`demo2rl.learning.vec.WorkerPoolVecEnv`) are limited without
signals: the parent waits on each worker's pipe with ``Connection.poll(timeout)`` and raises
:class:`UserCodeTimeout` (:func:`message`) when a worker misses it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator

KEY = "task.timeout_s"
"""The config key that sets the limit, named in every message."""


class UserCodeTimeout(TimeoutError):
    """A call of a task's env or expert took longer than ``task.timeout_s``."""


def message(what: str, seconds: float, where: str = "") -> str:
    """The error of a call ``what`` (e.g. ``"the env 'X-v0': step"``) that missed its limit,
    with ``where`` it happened (the episodes, the envs), if known."""
    return f"{what} did not return within {KEY} = {seconds:g} s" + (f" ({where})" if where else "")


@contextlib.contextmanager
def limit(
    seconds: float | None, what: str, where: Callable[[], str] = lambda: ""
) -> Iterator[None]:
    """Run the body with a time limit of ``seconds`` (None: no limit); past it, raise
    :class:`UserCodeTimeout` with :func:`message` of ``what`` and ``where()`` (called only then,
    so that describing the episodes costs nothing when calls return in time). Main thread only;
    see the module doc for what cannot be interrupted."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum: int, frame: object) -> None:
        raise UserCodeTimeout(message(what, seconds, where()))

    previous_handler = signal.signal(signal.SIGALRM, on_alarm)
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay > 0:  # an outer timer: what is left of it (at once if it is past)
            left = previous_delay - (time.monotonic() - start)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-6), previous_interval)
