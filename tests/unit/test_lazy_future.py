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


def test_done_callbacks_need_no_condition() -> None:
    # The transaction paths chain every coordinator call through a callback: none may build the lock.
    seen: list[object] = []
    ok: LazyFuture[int] = LazyFuture()
    ok.add_done_callback(lambda x: seen.append(x.result()))
    ok.add_done_callback(lambda x: seen.append("second"))
    ok.set_result(5)
    failed: LazyFuture[int] = LazyFuture()
    failed.add_done_callback(lambda x: seen.append(type(x.exception()).__name__))
    failed.set_exception(KeyError("k"))
    assert seen == [5, "second", "KeyError"]
    assert ok._cond is None and failed._cond is None


def test_callbacks_added_before_a_waiter_built_the_condition_still_run() -> None:
    seen: list[int] = []
    f: LazyFuture[int] = LazyFuture()
    f.add_done_callback(lambda x: seen.append(1))
    with pytest.raises(TimeoutError):
        f.result(0.01)  # builds the condition
    f.add_done_callback(lambda x: seen.append(2))
    f.set_result(0)
    assert seen == [1, 2]


def test_a_callback_that_raises_is_logged_and_the_others_run(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[int] = []

    def boom(_: cf.Future[int]) -> None:
        raise RuntimeError("callback failed")

    f: LazyFuture[int] = LazyFuture()
    f.add_done_callback(boom)
    f.add_done_callback(lambda x: seen.append(x.result()))
    with caplog.at_level("ERROR", logger="concurrent.futures"):
        f.set_result(9)
        f.add_done_callback(boom)  # after completion: called at once, logged the same way
    assert seen == [9]
    assert [r.message.startswith("exception calling callback") for r in caplog.records] == [True, True]


def test_a_callback_racing_the_completion_runs_exactly_once() -> None:
    for _ in range(2000):
        calls: list[int] = []
        f: LazyFuture[int] = LazyFuture()
        t = threading.Thread(target=f.set_result, args=(7,))
        t.start()
        f.add_done_callback(lambda x, calls=calls: calls.append(x.result()))
        t.join()
        assert calls == [7]


def test_cancel_runs_callbacks_added_without_a_condition() -> None:
    seen: list[bool] = []
    f: LazyFuture[int] = LazyFuture()
    f.add_done_callback(lambda x: seen.append(x.cancelled()))
    assert f.cancel()
    assert seen == [True]
