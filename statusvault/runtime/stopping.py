"""How a run is asked to stop from outside: a signal (SIGINT, SIGTERM: the run is interrupted, and the same command
resumes it) or a lost Lease (the run is cancelled: another holder goes on). Either way no new write is started, the
writes in flight finish, and the run then scales back, unpauses what is finished and reports."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

from statusvault.errors import Interrupted, StatusVaultError

log = logging.getLogger(__name__)
LEASE_LOST = "cancelled: this process no longer holds the right to restore (its Lease was lost)"


class Stop(threading.Event):
    """Set when the run must stop; `signum` says by which signal (0: a lost Lease or a deleted target)."""

    def __init__(self) -> None:
        super().__init__()
        self.signum = 0

    def error(self) -> StatusVaultError:
        """What stops the run where it stands."""
        if self.signum:
            return Interrupted(f"stopped by {signal.Signals(self.signum).name}: run the same command again to resume")
        return StatusVaultError(LEASE_LOST)


_SIGNALLED: list[int] = []  # the signal this process was told to stop by (a controller's SIGTERM), once


def signalled(signum: int) -> None:
    """This process is stopping on `signum`: a run cancelled from now on was interrupted, not cancelled (the
    controller sets its run's Lease event, a plain Event, to stop it)."""
    if not _SIGNALLED:
        _SIGNALLED.append(signum)


def stop_error(cancel: threading.Event) -> StatusVaultError:
    """The error a run stopped by `cancel` ends with: interrupted by a signal, else cancelled."""
    if isinstance(cancel, Stop):
        return cancel.error()
    if _SIGNALLED:
        name = signal.Signals(_SIGNALLED[0]).name
        return Interrupted(f"stopped by {name}: the next attempt resumes")
    return StatusVaultError(LEASE_LOST)


@contextlib.contextmanager
def on_signals(stop: Stop) -> Iterator[Stop]:
    """While inside, SIGINT and SIGTERM set `stop` (the run finishes its writes in flight and reports); a second
    signal stops at once (KeyboardInterrupt). Outside the main thread (the library called from a thread of its
    caller) the caller's own handlers stay."""
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.signum = signum
        stop.set()
        log.warning(
            "%s: stopping once the writes in flight are done (again to stop at once)", signal.Signals(signum).name
        )

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)
