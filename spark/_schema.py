"""The row schema: Spark's Kafka source schema plus ``txnId``."""

from __future__ import annotations

from functools import cache

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADER_TYPE = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


def spark_schema(include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(HEADER_TYPE)))
    # "(tc,seq)" as Pulsar prints a TxnID; null for plain (non-transactional) records.
    fields.append(StructField("txnId", StringType()))
    return StructType(fields)


@cache
def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark expects from ``read()`` (it checks equality, list item names included)."""
    header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.field("element", header))))
    fields.append(pa.field("txnId", pa.string()))
    return pa.schema(fields)
