"""A clock the tests move by hand: the writer's and the keeper's waits take no real time."""

from __future__ import annotations


class FakeClock:
    """A monotonic clock that moves only when the client sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
