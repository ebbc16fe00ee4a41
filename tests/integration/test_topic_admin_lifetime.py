"""A TopicAdmin's requests answered on librdkafka's threads must not keep it alive there."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from kafka_store import KafkaConfig, TopicAdmin


def test_an_admin_dropped_around_delete_records_never_aborts_the_process(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    """DeleteRecords answers through a callback on librdkafka's thread. If that callback held the
    last reference to the TopicAdmin, the AdminClient was destroyed on librdkafka's own thread,
    which librdkafka answers with abort(): the whole process gone. An admin kept until the answer
    gets it; one dropped at once fails its request with a StoreError (its client went with it)."""
    topic = f"admin_gc_{uid}"
    admin.ensure_topic(topic, 1)
    code = textwrap.dedent(
        f"""
        import gc
        from confluent_kafka import Producer
        from kafka_store import KafkaConfig, StoreError, TopicAdmin

        producer = Producer({{"bootstrap.servers": {kafka.bootstrap_servers!r}}})
        for i in range(8):
            producer.produce({topic!r}, b"x%d" % i)
        producer.flush(10)
        kafka = KafkaConfig(bootstrap_servers={kafka.bootstrap_servers!r})
        for below in (1, 2, 3):
            kept = TopicAdmin(kafka)
            kept.delete_records_before({topic!r}, 0, below).result(10)
            del kept
            gc.collect()
        dropped = []
        for below in (4, 5, 6):
            try:
                TopicAdmin(kafka).delete_records_before({topic!r}, 0, below).result(10)
                dropped.append("answered")
            except StoreError:
                dropped.append("failed")
            gc.collect()
        print("ok", *dropped)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[0] == "ok", done.stdout
