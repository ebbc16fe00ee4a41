"""Option parsing and streaming offsets of the Spark source (pure)."""

from __future__ import annotations

import pytest

from pulsar_txn.errors import ConfigError
from spark._offsets import from_json, rate_limit, to_json
from spark._options import EARLIEST, LATEST, parse_assign, parse_offsets, parse_options

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def test_options_are_case_insensitive_and_kafka_prefixed_ones_pass_through() -> None:
    opts = parse_options(
        {
            **BASE,
            "STARTINGOFFSETS": "earliest",
            "kafka.security.protocol": "PLAINTEXT",
            "includeHeaders": "True",
        },
        streaming=False,
    )
    assert opts.kafka_conf == {"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "PLAINTEXT"}
    assert opts.include_headers and opts.transaction_filter and opts.fail_on_data_loss
    conf = opts.kafka_config()
    assert conf.bootstrap_servers == "127.0.0.1:9092"
    assert conf.to_librdkafka()["security.protocol"] == "PLAINTEXT"


def test_offsets_accept_earliest_latest_and_sparks_per_partition_json() -> None:
    assert parse_offsets("x", None, "earliest") == "earliest"
    assert parse_offsets("x", " LATEST ", "earliest") == "latest"
    assert parse_offsets("x", '{"a":{"0":23,"1":-2},"b":{"3":-1}}', "earliest") == {
        ("a", 0): 23,
        ("a", 1): EARLIEST,
        ("b", 3): LATEST,
    }


@pytest.mark.parametrize(
    "raw",
    ["soon", "[1]", '{"a":[1]}', '{"a":{"x":1}}', '{"a":{"0":-3}}', '{"a":{"0":"5"}}', '{"a":{"0":true}}'],
)
def test_bad_offsets_raise_config_error(raw: str) -> None:
    with pytest.raises(ConfigError, match="startingOffsets"):
        parse_offsets("startingOffsets", raw, "earliest")


def test_exactly_one_subscription_option_is_required() -> None:
    with pytest.raises(ConfigError, match="exactly one"):
        parse_options({"kafka.bootstrap.servers": "h:1"}, streaming=False)
    with pytest.raises(ConfigError, match="exactly one"):
        parse_options({**BASE, "subscribePattern": "t.*"}, streaming=False)
    with pytest.raises(ConfigError, match="bootstrap"):
        parse_options({"subscribe": "t"}, streaming=False)
    assert parse_assign('{"a":[0,1],"b":[2]}') == [("a", 0), ("a", 1), ("b", 2)]
    with pytest.raises(ConfigError, match="assign"):
        parse_options({"kafka.bootstrap.servers": "h:1", "assign": '{"a":0}'}, streaming=False)


def test_batch_and_stream_offset_rules_follow_sparks_kafka_source() -> None:
    with pytest.raises(ConfigError, match="cannot be latest"):
        parse_options({**BASE, "startingOffsets": "latest"}, streaming=False)
    with pytest.raises(ConfigError, match="cannot be earliest"):
        parse_options({**BASE, "endingOffsets": '{"t":{"0":-2}}'}, streaming=False)
    with pytest.raises(ConfigError, match="batch reads only"):
        parse_options({**BASE, "endingOffsets": "latest"}, streaming=True)
    assert parse_options(BASE, streaming=True).starting == "latest"
    assert parse_options(BASE, streaming=False).starting == "earliest"
    with pytest.raises(ConfigError, match="maxOffsetsPerTrigger"):
        parse_options({**BASE, "maxOffsetsPerTrigger": "0"}, streaming=True)
    with pytest.raises(ConfigError, match="transactionFilter"):
        parse_options({**BASE, "transactionFilter": "maybe"}, streaming=False)
    with pytest.raises(ConfigError, match="bootstrap"):
        parse_options({**BASE, "kafka.bootstrap.servers": "nohost"}, streaming=False).kafka_config()


def test_marker_secret_snapshot_topic_and_raw_mode() -> None:
    opts = parse_options(
        {**BASE, "markerSecret": "s3", "snapshotTopic": "none", "transactionFilter": "false"}, streaming=False
    )
    assert opts.marker_secret == b"s3"
    assert opts.snapshot_topic is None
    assert not opts.transaction_filter


def test_stream_offsets_round_trip_as_sparks_kafka_json() -> None:
    offsets = {("a", 0): 5, ("a", 10): 7, ("b", 1): 0}
    data = to_json(offsets)
    assert data == {"a": {"0": 5, "10": 7}, "b": {"1": 0}}
    assert from_json(data) == offsets
    with pytest.raises(ConfigError):
        from_json({"a": 3})


def test_rate_limit_shares_the_cap_in_proportion_and_every_partition_with_data_moves() -> None:
    starts = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    ends = {("t", 0): 90, ("t", 1): 110, ("t", 2): 5}
    capped = rate_limit(starts, ends, 10)
    assert capped == {("t", 0): 9, ("t", 1): 101, ("t", 2): 5}
    assert sum(capped[tp] - starts[tp] for tp in starts) <= 10
    assert rate_limit(starts, ends, 1000) == ends  # under the cap: unchanged
    # A partition new since ``starts`` counts from 0.
    assert rate_limit({}, {("t", 0): 4}, 2) == {("t", 0): 2}


def test_start_below_log_start_fails_with_data_loss_unless_failondataloss_is_false() -> None:
    from pulsar_txn.errors import DataLossError
    from spark._plan import Planner

    strict = Planner(parse_options(BASE, streaming=False))
    assert strict.check_start(("t", 0), 5, 5) == 5
    with pytest.raises(DataLossError, match=r"t\[0\]: offsets 2\.\.4"):
        strict.check_start(("t", 0), 2, 5)
    lenient = Planner(parse_options({**BASE, "failOnDataLoss": "false"}, streaming=False))
    assert lenient.check_start(("t", 0), 2, 5) == 5


@pytest.mark.parametrize(
    "option",
    ["startingTimestamp", "startingOffsetsByTimestamp", "endingTimestamp", "endingOffsetsByTimestamp"],
)
def test_timestamp_offset_options_are_refused_rather_than_ignored(option: str) -> None:
    with pytest.raises(ConfigError, match=option):
        parse_options({**BASE, option: "1700000000000"}, streaming=False)


def test_offsets_json_must_name_every_partition_read_as_sparks_kafka_source_requires() -> None:
    from spark._plan import Bounds, Planner

    planner = Planner(parse_options(BASE, streaming=False))
    bounds = {("t", 0): Bounds(0, 10, 10), ("t", 1): Bounds(2, 8, 8)}
    with pytest.raises(ConfigError, match=r"missing \[\('t', 1\)\]"):
        planner.resolve({("t", 0): 5}, bounds)
    assert planner.resolve({("t", 0): 5, ("t", 1): EARLIEST}, bounds) == {("t", 0): 5, ("t", 1): 2}


@pytest.mark.parametrize("extra", [{"kafka.sasl.jaas.config": "x"}, {"kafka.security.protocol": "SASL_SSLX"}])
def test_a_kafka_setting_the_client_refuses_is_a_config_error_naming_the_options(
    extra: dict[str, str],
) -> None:
    """Java-only settings (Spark's JAAS line) or bad values: librdkafka refuses them when the client
    is made; that is the user's configuration, not a storage failure."""
    from spark._plan import Planner

    planner = Planner(parse_options({**BASE, **extra}, streaming=False))
    with pytest.raises(ConfigError, match=r"kafka\.\* options: .*invalid Kafka client setting"):
        planner.partitions()


def test_fetch_batch_above_what_librdkafka_takes_is_a_config_error() -> None:
    opts = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}
    assert parse_options({**opts, "fetchBatch": "1000000"}, streaming=False).fetch_batch == 1_000_000
    with pytest.raises(ConfigError, match="fetchBatch"):
        parse_options({**opts, "fetchBatch": "1000001"}, streaming=False)


def test_assign_refuses_json_booleans_as_partitions() -> None:
    """true read as partition 1, then failed in an executor with an untyped ArrowTypeError (review,
    session 26)."""
    with pytest.raises(ConfigError, match="partition numbers"):
        parse_assign('{"t":[true]}')


@pytest.mark.parametrize("value", [" , ", ",", " ,, "])
def test_subscribe_naming_no_topic_is_refused(value: str) -> None:
    """It read nothing, silently (Spark's Kafka source: "No topics to subscribe to")."""
    with pytest.raises(ConfigError, match="names no topic"):
        parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": value}, streaming=False)


@pytest.mark.parametrize("value", ["86400001", "9" * 400])
def test_a_poll_timeout_beyond_a_day_is_a_config_error_not_an_overflow(value: str) -> None:
    """A huge pollTimeoutMs raised OverflowError out of float() (review, session 32)."""
    opts = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}
    assert parse_options({**opts, "pollTimeoutMs": "86400000"}, streaming=False).poll_timeout_s == 86_400
    with pytest.raises(ConfigError, match="pollTimeoutMs"):
        parse_options({**opts, "pollTimeoutMs": value}, streaming=False)


@pytest.mark.parametrize("partition", [2**31, 2**40])
def test_partitions_beyond_kafkas_int32_are_config_errors(partition: int) -> None:
    """They passed the options and failed later with OverflowError inside the Kafka client
    (review, session 32)."""
    assert parse_assign(f'{{"t":[{2**31 - 1}]}}') == [("t", 2**31 - 1)]
    with pytest.raises(ConfigError, match="partition numbers"):
        parse_assign(f'{{"t":[{partition}]}}')
    with pytest.raises(ConfigError, match="not a Kafka partition number"):
        parse_offsets("startingOffsets", f'{{"t":{{"{partition}":0}}}}', "earliest")


def test_offsets_beyond_an_int64_are_config_errors() -> None:
    assert parse_offsets("startingOffsets", f'{{"t":{{"0":{2**63 - 1}}}}}', "earliest") == {
        ("t", 0): 2**63 - 1
    }
    with pytest.raises(ConfigError, match="must be >= 0"):
        parse_offsets("startingOffsets", f'{{"t":{{"0":{2**63}}}}}', "earliest")
