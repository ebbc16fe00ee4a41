"""Which DataFrame schemas a transactional write takes, and the message one row becomes (pure)."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DoubleType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from pulsar_txn.errors import IncompatibleSchema, InvalidTopicName
from spark._write_schema import OutMessage, layout_for

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def schema(**cols: object) -> StructType:
    return StructType([StructField(name, dtype) for name, dtype in cols.items()])  # type: ignore[arg-type]


def test_all_kafka_sink_columns_map_to_one_message() -> None:
    layout = layout_for(
        schema(
            key=StringType(), value=BinaryType(), topic=StringType(), partition=IntegerType(), headers=HEADERS
        ),
        None,
    )
    msg = layout.message(("k", bytearray(b"v"), "t", 2, [("h", bytearray(b"x")), ("e", None)]))
    assert msg == OutMessage("t", 2, b"v", "k", {"h": "x", "e": ""})


def test_topic_option_overrides_the_topic_column_like_spark_kafka_sink() -> None:
    layout = layout_for(schema(value=StringType(), topic=StringType()), "fixed")
    assert layout.message(("v", "other")).topic == "fixed"


def test_string_value_is_utf8_and_absent_optional_columns_are_none() -> None:
    msg = layout_for(schema(value=StringType()), "t").message(("héllo",))
    assert msg == OutMessage("t", None, "héllo".encode(), None, {})


@pytest.mark.parametrize(
    ("cols", "topic", "needle"),
    [
        ({"key": StringType()}, "t", "'value' column"),
        ({"value": DoubleType()}, "t", "column 'value' must be string or binary"),
        ({"value": StringType(), "topic": BinaryType()}, None, "column 'topic' must be string"),
        ({"value": StringType(), "partition": StringType()}, "t", "'partition' must be an integer"),
        ({"value": StringType(), "headers": StringType()}, "t", "'headers' must be array"),
        ({"value": StringType(), "vaule": StringType()}, "t", "unexpected column(s) ['vaule']"),
        ({"value": StringType()}, None, "no topic"),
    ],
)
def test_bad_schema_is_an_incompatible_schema_error_naming_the_column(
    cols: dict[str, object], topic: str | None, needle: str
) -> None:
    with pytest.raises(IncompatibleSchema, match=None) as info:
        layout_for(schema(**cols), topic)
    assert needle in str(info.value)


def test_bad_rows_are_typed_errors() -> None:
    layout = layout_for(schema(value=BinaryType(), key=BinaryType(), partition=IntegerType()), "t")
    with pytest.raises(IncompatibleSchema, match="null value"):
        layout.message((None, None, None))
    with pytest.raises(IncompatibleSchema, match="not UTF-8"):
        layout.message((b"v", b"\xff\xfe", None))
    with pytest.raises(IncompatibleSchema, match="negative partition"):
        layout.message((b"v", None, -1))


def test_invalid_topic_option_fails_on_the_driver() -> None:
    with pytest.raises(InvalidTopicName):
        layout_for(schema(value=StringType()), "a/b")
