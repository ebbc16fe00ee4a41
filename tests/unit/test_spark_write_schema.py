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
    msg = layout.message(("k", bytearray(b"v"), "t", 2, [("h", bytearray(b"x")), ("e", b"")]))
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


def test_headers_that_would_be_lost_or_changed_are_refused() -> None:
    """A header named twice kept only its last value, a null value became "" and a null element was
    an untyped TypeError (review, session 33): properties are a map of strings."""
    layout = layout_for(schema(value=StringType(), headers=HEADERS), "t")
    with pytest.raises(IncompatibleSchema, match="twice"):
        layout.message(("v", [("h", b"a"), ("h", b"b")]))
    with pytest.raises(IncompatibleSchema, match="null value"):
        layout.message(("v", [("h", None)]))
    with pytest.raises(IncompatibleSchema, match="null element"):
        layout.message(("v", [None]))


def test_the_sources_headers_give_back_the_properties_and_refuse_its_metadata() -> None:
    """Our source's headers (includeHeaders) carry properties as pulsar.prop.<name>: a copied topic
    keeps them under their names. Its metadata headers were stored as properties (review)."""
    layout = layout_for(schema(value=StringType(), headers=HEADERS), "t")
    msg = layout.message(("v", [("pulsar.prop.n", b"1"), ("plain", b"2")]))
    assert msg.properties == {"n": "1", "plain": "2"}
    for internal in ("pulsar.meta", "ptxn.txn", "pulsar.seq"):
        with pytest.raises(IncompatibleSchema, match="metadata of the source"):
            layout.message(("v", [(internal, b"\x00")]))
    with pytest.raises(IncompatibleSchema, match="twice"):
        layout.message(("v", [("pulsar.prop.n", b"1"), ("n", b"2")]))


def test_a_column_named_twice_is_refused_not_half_written() -> None:
    twice = StructType([StructField("value", StringType()), StructField("value", StringType())])
    with pytest.raises(IncompatibleSchema, match="more than once"):
        layout_for(twice, "t")
