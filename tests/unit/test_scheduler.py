"""The callback worker's scheduling decisions, without a database: which queue a dispatcher takes
next (round robin, notifications, one poller per naptime, cool-downs, once mode), when an idle
dispatcher sleeps and wakes, when the pool grows and shrinks, and the reconnect backoff."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from pgmq_build.worker import (
    _MAX_WAIT,
    Worker,
    _connect_failed_level,
    _error_cooldown,
    _jittered,
    _next_backoff,
    _next_tx_size,
    _retirement,
    _Scheduler,
    _should_grow,
    _supervisor_tick,
)


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def scheduler(queues=("a", "b", "c"), *, once=False, naptime=0.15) -> tuple[_Scheduler, Clock]:
    clock = Clock()
    s = _Scheduler(naptime, once=once, clock=clock)
    s.set_queues(list(queues))
    return s, clock


def names(s: _Scheduler, n: int) -> list[str | None]:
    out = []
    for _ in range(n):
        pick = s.take()
        out.append(None if pick is None else pick[0])
    return out


def drain(s: _Scheduler, *queues: str) -> None:
    """A dispatcher took each queue and found it empty."""
    for q in queues:
        pick = s.take()
        assert pick is not None and pick[0] == q
        s.empty(*pick)


# ----------------------------------------------------------------------------- which queue next

def test_new_queues_are_taken_round_robin():
    s, _ = scheduler()
    # every queue may have work at first; a queue with work stays eligible until found empty
    assert names(s, 7) == ["a", "b", "c", "a", "b", "c", "a"]


def test_round_robin_resumes_after_the_last_queue_taken_not_from_the_start():
    s, _ = scheduler()
    drain(s, "a")  # a is empty now: b, c, b, c ...
    assert names(s, 4) == ["b", "c", "b", "c"]
    s.wake("a")
    # the pointer is after c: a comes next, then b
    assert names(s, 3) == ["a", "b", "c"]


def test_a_queue_found_empty_is_not_taken_until_notified():
    s, _ = scheduler(("a", "b"))
    drain(s, "a", "b")
    assert s.take() is None
    assert not s.has_work()
    s.wake("b")
    assert s.has_work()
    assert names(s, 2) == ["b", "b"]


def test_a_notification_during_the_look_is_not_erased_by_empty():
    s, _ = scheduler(("a",))
    q, gen = s.take()
    s.wake("a")  # a message arrived while the dispatcher was finding the queue empty
    s.empty(q, gen)
    assert s.take() == ("a", gen + 1)


def test_wake_without_a_queue_wakes_all_of_them():
    s, _ = scheduler()
    drain(s, "a", "b", "c")
    s.wake()  # a reconnection: notifications may have been missed
    assert sorted(names(s, 3)) == ["a", "b", "c"]


def test_notifications_for_unknown_queues_are_ignored():
    s, _ = scheduler(("a",))
    drain(s, "a")
    s.wake("ghost")
    assert s.take() is None


# ----------------------------------------------------------------------------- polling

def test_idle_queues_are_polled_once_per_naptime_by_one_dispatcher():
    s, clock = scheduler(("a", "b"), naptime=0.15)
    drain(s, "a", "b")
    assert s.take() is None
    clock.advance(0.2)
    # one poll per queue: the first two takes get a and b, nobody else
    assert sorted(names(s, 2)) == ["a", "b"]
    assert s.take() is None
    clock.advance(0.1)  # not yet the next poll (0.15 after the last one)
    assert s.take() is None
    clock.advance(0.1)
    assert sorted(names(s, 2)) == ["a", "b"]


def test_a_poll_that_finds_work_invites_the_other_dispatchers():
    s, clock = scheduler(("a",))
    drain(s, "a")
    clock.advance(1)
    q, gen = s.take()
    assert s.take() is None  # a poll is taken by one dispatcher only
    s.found_work(q)
    assert names(s, 3) == ["a", "a", "a"]


def test_once_mode_never_polls():
    s, clock = scheduler(("a", "b"), once=True)
    drain(s, "a", "b")
    clock.advance(3600)
    assert s.take() is None
    assert not s.has_work()


# ----------------------------------------------------------------------------- cool-down after an error

def test_a_queue_that_failed_cools_down_then_is_polled():
    s, clock = scheduler(("a", "b"))
    s.cool_down("a", 5.0)
    assert names(s, 3) == ["b", "b", "b"]
    s.wake("a")  # a notification does not cut the cool-down short
    assert names(s, 2) == ["b", "b"]
    clock.advance(5.0)
    assert "a" in names(s, 2)


def test_once_mode_gives_up_on_a_queue_that_failed():
    s, clock = scheduler(("a",), once=True)
    s.cool_down("a", 1.0)
    clock.advance(2.0)
    assert s.take() is None
    assert not s.has_work()


def test_a_cooling_queue_is_not_work():
    s, clock = scheduler(("a",))
    s.cool_down("a", 1.0)
    assert not s.has_work()
    clock.advance(1.0)
    assert s.has_work()


# ----------------------------------------------------------------------------- the queue list

def test_removed_queues_are_never_taken_and_added_ones_start_with_work():
    s, _ = scheduler(("a", "b"))
    drain(s, "a", "b")
    s.set_queues(["b", "c"])
    assert names(s, 3) == ["c", "c", "c"]  # b stays empty; c is new
    s.wake("a")  # a notification of a queue no longer served
    assert "a" not in names(s, 4)
    s.set_queues(["a", "b", "c"])  # back again: a starts over, with work
    assert "a" in names(s, 3)


def test_no_queues_nothing_to_take():
    s, clock = scheduler(())
    clock.advance(10)
    assert s.take() is None
    assert not s.has_work()


# ----------------------------------------------------------------------------- sleeping and waking

def test_wait_returns_at_once_when_there_is_work_or_a_stop():
    s = _Scheduler(10.0, once=False)
    s.set_queues(["a"])  # a new queue may have work
    t = time.monotonic()
    s.wait()
    s.empty(*s.take())  # now nothing is eligible: only the stop ends the wait early
    s.stop()
    s.wait()
    assert time.monotonic() - t < 0.5 * _MAX_WAIT


def test_an_idle_dispatcher_sleeps_until_a_notification():
    s = _Scheduler(10.0, once=False)
    s.set_queues(["a"])
    s.empty(*s.take())  # nothing eligible; next poll in 10 s
    woke = []

    def sleeper():
        t = time.monotonic()
        s.wait()
        woke.append(time.monotonic() - t)

    th = threading.Thread(target=sleeper)
    th.start()
    time.sleep(0.1)
    assert woke == []  # still asleep
    s.wake("a")
    th.join(2)
    assert woke and woke[0] < 0.5 * _MAX_WAIT  # woken, not timed out


def test_an_idle_dispatcher_sleeps_at_most_max_wait():
    s = _Scheduler(60.0, once=False)
    s.set_queues(["a"])
    s.empty(*s.take())
    t = time.monotonic()
    s.wait()
    took = time.monotonic() - t
    assert 0.5 * _MAX_WAIT <= took < _MAX_WAIT + 0.5  # re-checks retirement at least this often


# ----------------------------------------------------------------------------- pool size

def test_pool_grows_only_when_every_dispatcher_is_busy_long_enough():
    now = 100.0
    assert _should_grow([90.0, 94.0], now, start_delay=5, max_workers=10, stopping=False)
    assert not _should_grow([90.0, 96.0], now, start_delay=5, max_workers=10, stopping=False)
    assert not _should_grow([90.0, None], now, start_delay=5, max_workers=10, stopping=False)


def test_pool_never_grows_past_max_or_when_stopping_or_empty():
    busy = [0.0, 0.0, 0.0]
    assert _should_grow(busy, 100.0, 5, max_workers=4, stopping=False)
    assert not _should_grow(busy, 100.0, 5, max_workers=3, stopping=False)
    assert not _should_grow(busy, 100.0, 5, max_workers=10, stopping=True)
    assert not _should_grow([], 100.0, 5, max_workers=10, stopping=False)


def test_zero_start_delay_grows_as_soon_as_all_are_busy():
    assert _should_grow([100.0], 100.0, 0, max_workers=2, stopping=False)


def retire(**kw):
    args = dict(stopping=False, once=False, has_work=False, idle_for=0.0, idle_timeout=60.0,
                pool_size=5, min_workers=3)
    args.update(kw)
    return _retirement(**args)


def test_daemon_dispatcher_retires_when_idle_long_enough_above_min_workers():
    assert retire(idle_for=59.9) is None
    assert retire(idle_for=60.0) == "idle"
    assert retire(idle_for=600, pool_size=3) is None  # never below min_workers
    assert retire(idle_for=600, pool_size=4) == "idle"


def test_once_mode_dispatchers_leave_when_nothing_is_left():
    assert retire(once=True, has_work=True, idle_for=0) is None
    assert retire(once=True, has_work=False, idle_for=0, pool_size=1) == "drained"


def test_everyone_leaves_on_stop():
    assert retire(stopping=True, pool_size=1) == "stop"
    assert retire(stopping=True, once=True, has_work=True) == "stop"


# ----------------------------------------------------------------------------- reconnecting

def test_reconnect_backoff_doubles_up_to_the_maximum():
    delays, d = [], 0.1
    for _ in range(8):
        delays.append(d)
        d = _next_backoff(d, 1.0)
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0])


def test_jitter_spreads_half_to_one_and_a_half_times():
    assert _jittered(2.0, 0.0) == 1.0
    assert _jittered(2.0, 0.5) == 2.0
    assert _jittered(2.0, 0.999) == pytest.approx(2.998)


def test_connect_failures_warn_at_powers_of_two_from_eight():
    warned = [a for a in range(1, 70) if _connect_failed_level(a) == logging.WARNING]
    assert warned == [8, 16, 32, 64]
    assert _connect_failed_level(1) == logging.DEBUG


def test_error_cooldown_starts_short_and_doubles_to_the_cap():
    assert [_error_cooldown(n, 5.0) for n in range(1, 9)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6,
                                                               3.2, 5.0]
    assert _error_cooldown(1, 0.02) == 0.02  # never above the cap (a short refresh_interval)


def test_supervisor_tick_follows_start_delay_within_bounds():
    assert _supervisor_tick(5.0) == 0.25
    assert _supervisor_tick(0.4) == pytest.approx(0.1)
    assert _supervisor_tick(0.0) == 0.02


# ----------------------------------------------------------------------------- options

@pytest.mark.parametrize("kw", [
    {"min_workers": 0}, {"min_workers": 3, "max_workers": 2}, {"batch": 0}, {"naptime_ms": 0},
    {"start_delay": -1}, {"idle_timeout": -1}, {"refresh_interval": 0}, {"max_backoff": 0},
])
def test_worker_refuses_bad_pool_options(kw):
    with pytest.raises(ValueError):
        Worker("host=/nonexistent", **kw)


def test_worker_deduplicates_fixed_queues_in_order():
    w = Worker("host=/nonexistent", ["b", "a", "b"])
    assert w.fixed_queues == ["b", "a"]
    assert w.naptime == pytest.approx(0.15)


def test_tx_size_doubles_up_to_what_fits_in_the_target_and_the_cap():
    assert _next_tx_size(1, 1, 0.001, cap=20) == 2  # fast: at most twice the last
    assert _next_tx_size(16, 16, 0.016, cap=20) == 20  # never above tx_batch
    assert _next_tx_size(50, 50, 0.001, cap=10) == 10
    assert _next_tx_size(8, 8, 0.2, cap=20, target=0.05) == 2  # 25 ms each: two fit in 50 ms
    assert _next_tx_size(8, 3, 0.3, cap=20, target=0.05) == 1  # 100 ms each: one per transaction
    assert _next_tx_size(1, 1, 2.0, cap=20) == 1  # a slow callback keeps its own transaction
    assert _next_tx_size(4, 4, 0.0, cap=20) == 8  # the clock did not move: as fast as can be
    assert _next_tx_size(4, 0, 0.1, cap=20) == 4  # nothing dispatched: nothing learned
    assert _next_tx_size(30, 0, 0.1, cap=20) == 20
