"""The owner's side of the write gate: keep the lease of a gate one DAG run holds, or stop the work in time.

Airflow's tasks and the Spark job renew the same lease with these, from the database's clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from airflow_iceberg.core.gate_state import GateOwner


#: How a lease is lost, as each reason says it (:func:`lease_loss`): taken from the run, at the pause's ceiling, or
#: not renewed in time because the gate's MySQL did not answer (the run still held the gate).
_NO_LONGER_HELD = "is no longer held by"


_AT_CEILING = "reached the pause's ceiling"


_NOT_RENEWED = "could not be renewed"


class LeaseLostError(RuntimeError):
    """The run's lease cannot be kept (it was taken over or forced open, it reached the pause's ceiling, or it could
    not be renewed in time): stop the work before writers resume."""


def lease_taken(table: str, owner: GateOwner) -> str:
    """The reason of a lease that a renewal found no longer ``owner``'s."""
    return (
        f"the write gate of {table} {_NO_LONGER_HELD} {owner}: its lease ended, another run took it over, or someone "
        "forced it open"
    )


def lease_loss(reason: str) -> str:
    """Which way the lease in ``reason`` (a :class:`LeaseLostError`'s message) was lost: ``"taken"``,
    ``"ceiling"``, ``"not renewed"``, or ``"unknown"``."""
    for phrase, kind in ((_AT_CEILING, "ceiling"), (_NOT_RENEWED, "not renewed"), (_NO_LONGER_HELD, "taken")):
        if phrase in reason:
            return kind
    return "unknown"


@dataclass(frozen=True)
class Lease:
    """A renewed lease: seconds left by the database clock, and whether it now ends at the pause's deadline."""

    seconds_left: float
    at_pause_deadline: bool


class RenewableLease(Protocol):
    """A lease its owner can renew: :class:`~airflow_iceberg.core.gate_store.GateLease`, or a test's."""

    table: str

    def renew(self) -> Lease:
        """Renew; raise :class:`LeaseLostError` if the owner no longer holds the gate."""
        ...


class LeaseKeeper:
    """Keep renewing a gate's lease from a daemon thread while work runs, and stop the work before it ends.

    :meth:`start` renews once, at once (so the work never starts on a lost lease), then two daemon threads run:
    one renews every ``every`` seconds, the other watches the deadline. ``on_lost`` is called once, with the
    reason, when a renewal finds the run no longer holds the gate, or when the lease is within ``margin`` seconds
    of its end (MySQL unreachable, a renewal hanging, or the lease capped at the pause's deadline). The watch does
    not wait for a renewal to return: one that hangs on a dead network or a row lock cannot hold the work past
    the lease. Writers resume when the lease ends, so the work must be stopped by then: ``margin`` is the time
    ``on_lost`` has for that. The lease's end is counted from before each renewal was sent, so it is never
    later than the database's own.

    :param lease: The gate's lease, as its owner renews it.
    :param on_lost: Stops the work; called once, from one of the keeper's threads.
    :param every: Seconds between renewals.
    :param margin: Seconds before the lease ends at which the work is stopped if the lease cannot be extended.
    :param clock: Monotonic clock, in seconds.
    :param wait: Waits up to the given seconds and returns whether the keeper was stopped meanwhile; with
        ``clock``, replaceable to run the keeper on a fake clock.
    :param log: Where renewal messages go.
    """

    def __init__(
        self,
        lease: RenewableLease,
        on_lost: Callable[[str], None],
        *,
        every: float,
        margin: float,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], bool] | None = None,
        log: Callable[[str], None] = print,
    ) -> None:
        self.lease = lease
        self.on_lost = on_lost
        self.every = every
        self.margin = margin
        self._clock = clock
        self._log = log
        self._ends_at = 0.0  # by self._clock: when the last lease renewed ends
        self._at_pause_deadline = False  # whether that lease ends at the pause's ceiling
        self._stopped = threading.Event()
        self._wait = wait or self._stopped.wait
        self._threads: list[threading.Thread] = []
        self._lost_once = threading.Lock()
        self.lost: str | None = None

    @classmethod
    def for_lease(cls, lease: RenewableLease, lease_seconds: float, on_lost: Callable[[str], None], **kwargs: Any):
        """A keeper that renews a quarter of the lease at a time and stops the work a quarter early (2-15 s)."""
        return cls(
            lease, on_lost, every=max(1.0, lease_seconds / 4), margin=max(2.0, min(15.0, lease_seconds / 4)), **kwargs
        )

    def renew_now(self) -> Lease:
        """Renew at once; raise :class:`LeaseLostError` if the run no longer holds the gate or too little is left."""
        sent = self._clock()
        renewed = self.lease.renew()
        self._ends_at = max(self._ends_at, sent + renewed.seconds_left)
        self._at_pause_deadline = renewed.at_pause_deadline
        if renewed.seconds_left <= self.margin:
            raise LeaseLostError(self._ceiling_reached(renewed.seconds_left))
        return renewed

    def renew_before_work(self) -> None:
        """Before the next piece of work starts: renew, or, with MySQL away, go on only while the last lease has
        more than ``margin`` left. Raise :class:`LeaseLostError` otherwise, or if the lease was lost already."""
        import pymysql

        if self.lost is not None:
            raise LeaseLostError(self.lost)
        try:
            self.renew_now()
        except (pymysql.err.MySQLError, OSError) as error:
            if self._clock() >= self._ends_at - self.margin:
                raise LeaseLostError(
                    f"the lease of the write gate of {self.lease.table} ends in under {self.margin:.0f} s and "
                    f"{_NOT_RENEWED} ({error}): no work may start"
                ) from error
            self._log(f"could not renew the lease of {self.lease.table} ({error}); its last lease still holds")

    def start(self) -> Lease:
        """Renew once (raising :class:`LeaseLostError` if lost), then keep renewing and watching in daemon threads."""
        renewed = self.renew_now()
        for name, target in (("gate-lease-keeper", self._run), ("gate-lease-watch", self._watch)):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return renewed

    def stop(self) -> None:
        self._stopped.set()
        for thread in self._threads:
            thread.join(timeout=5)

    def _ceiling_reached(self, seconds_left: float) -> str:
        return (
            f"the write gate of {self.lease.table} has {seconds_left:.1f} s of lease left and {_AT_CEILING} "
            "(max_pause_seconds): no work may start or go on"
        )

    def _lose(self, reason: str) -> None:
        with self._lost_once:
            if self.lost is not None:
                return
            self.lost = reason
        self._log(f"lease lost: {reason}")
        self.on_lost(reason)

    def _run(self) -> None:
        """Renew every ``every`` seconds, and once more just before the watch would give up."""
        import pymysql

        while self.lost is None:
            stop_at = self._ends_at - self.margin
            if self._wait(max(0.0, min(self.every, stop_at - self._clock()))) or self.lost is not None:
                return
            try:
                self.renew_now()
            except LeaseLostError as error:
                self._lose(str(error))
                return
            except (pymysql.err.MySQLError, OSError) as error:
                self._log(f"could not renew the lease of {self.lease.table} ({error}); trying again")
                if self._wait(min(self.every, 1.0)):  # no busy loop while MySQL is away
                    return

    def _watch(self) -> None:
        """Stop the work ``margin`` seconds before the lease ends, whatever the renewals are doing."""
        while self.lost is None:
            left = self._ends_at - self.margin - self._clock()
            if left <= 0:
                seconds = max(0.0, self._ends_at - self._clock())
                self._lose(
                    self._ceiling_reached(seconds)
                    if self._at_pause_deadline
                    else f"the lease of the write gate of {self.lease.table} ends in under {self.margin:.0f} s and "
                    f"{_NOT_RENEWED}: writers resume when it ends"
                )
                return
            if self._wait(left):
                return
