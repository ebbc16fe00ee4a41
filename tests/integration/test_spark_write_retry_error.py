"""A retried write task raises the error the rows make a send fail with, not only "an earlier
attempt may have produced". Found by the Spark-writer review (session 42): with Spark's task retries
(spark.task.maxFailures, 4 on a cluster), Spark reports only the last attempt's error, so a batch
with a row over the record limit, a null value or a compacted topic failed with a retry-me
TransactionHasOperationFailed and the real cause was only in the executor log. Here the retried
attempt is called as Spark calls it (local mode gives one attempt only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kafka_store import TopicAdmin
from pulsar_txn import MessageTooBig, NotAllowedError
from pulsar_txn.errors import IncompatibleSchema, TransactionHasOperationFailed
from tests.conftest import Cluster

pytestmark = pytest.mark.integration


class _SecondAttempt:
    def attemptNumber(self) -> int:
        return 1

    def partitionId(self) -> int:
        return 0


@pytest.mark.parametrize(
    ("rows", "compacted", "error"),
    [
        ([(b"ok",), (b"x" * 1_100_000,)], False, MessageTooBig),
        ([(b"ok",), (None,)], False, IncompatibleSchema),
        ([(b"ok",)], True, NotAllowedError),
        ([(b"ok",), (b"fine",)], False, TransactionHasOperationFailed),  # rows fine: the attempt's own
    ],
    ids=["too-big", "null-value", "compacted", "rows-fine"],
)
def test_a_retried_write_task_raises_the_error_the_rows_cause(
    cluster: Callable[..., Cluster],
    admin: TopicAdmin,
    uid: str,
    monkeypatch: pytest.MonkeyPatch,
    rows: list[Any],
    compacted: bool,
    error: type[Exception],
) -> None:
    import pyspark

    from spark._write_schema import RowLayout
    from spark._write_task import ClientSettings, write_partition

    c = cluster(tb_service_enabled=False)
    topic = f"sw_retry_{uid}"
    admin.ensure_topic(topic, 1, {"cleanup.policy": "compact"} if compacted else None)
    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: _SecondAttempt()))
    settings = ClientSettings(c.coordinator.url or "", c.kafka.bootstrap_servers, num_tcs=c.config.num_tcs)
    txn = c.client.transaction(60)
    with pytest.raises(error):
        write_partition(settings, RowLayout(value=0, default_topic=topic), str(txn.txn_id), 60_000, rows)
    txn.abort()
