"""LazyFuture behaves like concurrent.futures.Future while building its lock only on need."""

from __future__ import annotations

import concurrent.futures as cf
import threading

import pytest

from pulsar_txn._future import LazyFuture


def test_finished_future_needs_no_condition() -> None:
    f: LazyFuture[int] = LazyFuture()
    f.set_result(3)
    assert f.done() and f.result() == 3 and f.exception() is None
    assert f._cond is None and f._lists is None


def test_exception_is_raised_by_result() -> None:
    f: LazyFuture[int] = LazyFuture()
    f.set_exception(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        f.result()
    assert isinstance(f.exception(), ValueError)


def test_second_completion_is_an_invalid_state() -> None:
    f: LazyFuture[int] = LazyFuture()
    f.set_result(1)
    with pytest.raises(cf.InvalidStateError):
        f.set_result(2)
    with pytest.raises(cf.InvalidStateError):
        f.set_exception(ValueError())


def test_pending_result_times_out_then_cancel_works() -> None:
    f: LazyFuture[int] = LazyFuture()
    with pytest.raises(TimeoutError):
        f.result(0.01)
    assert f.cancel() and f.cancelled()
    with pytest.raises(cf.CancelledError):
        f.result()


def test_done_callbacks_run_whether_added_before_or_after_completion() -> None:
    seen: list[int] = []
    before: LazyFuture[int] = LazyFuture()
    before.add_done_callback(lambda x: seen.append(x.result()))
    before.set_result(1)
    after: LazyFuture[int] = LazyFuture()
    after.set_result(2)
    after.add_done_callback(lambda x: seen.append(x.result()))
    assert seen == [1, 2]


def test_wait_and_as_completed_see_completions_from_another_thread() -> None:
    futures: list[LazyFuture[int]] = [LazyFuture() for _ in range(20)]
    threading.Timer(0.05, lambda: [f.set_result(i) for i, f in enumerate(futures)]).start()
    assert sum(f.result() for f in cf.as_completed(futures, timeout=10)) == sum(range(20))
    more: list[LazyFuture[int]] = [LazyFuture() for _ in range(5)]
    threading.Timer(0.05, lambda: [f.set_exception(ValueError()) for f in more]).start()
    done, not_done = cf.wait(more, timeout=10)
    assert len(done) == 5 and not not_done


def test_a_waiter_racing_the_completion_always_wakes() -> None:
    # Completion without a condition and creation of one never interleave: no waiter can miss it.
    for _ in range(2000):
        f: LazyFuture[int] = LazyFuture()
        t = threading.Thread(target=f.set_result, args=(7,))
        t.start()
        assert f.result(5) == 7
        t.join()
