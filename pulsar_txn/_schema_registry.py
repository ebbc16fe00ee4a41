"""Avro writer schemas by fingerprint, kept in a compacted Kafka topic: Pulsar's schema registry, as
far as readers need it.

A producer with an Avro schema registers it before its first send (one record, key
``avro/<fingerprint>/<SHA-256 of the value, 16 hex digits>``, value the schema's JSON: a record filed
under a fingerprint by someone else has another key, so compaction never removes the real one for
it). A reader that meets a message written with a
schema it does not know looks the fingerprint up here, and then reads the message by Avro schema
resolution, as pulsar-client's ``AvroSchema`` fetches a message's writer schema from the broker: a
consumer on version 2 of a record reads version 1's messages (new fields take their defaults), and
version 1 reads version 2's. A record is trusted only if its content has the fingerprint it is filed
under (forged or corrupt ones are logged and ignored): a schema can never be swapped for another.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kafka_store import BrokerUnavailableError, KafkaConfig, StoreError, TopicAdmin, replay_compacted
from kafka_store.producer import Appender
from pulsar_txn.schema import avro_fingerprint

__all__ = ["DEFAULT_SCHEMA_TOPIC", "SchemaRegistry"]

log = logging.getLogger(__name__)

DEFAULT_SCHEMA_TOPIC = "__pulsar_txn_schemas"
_TOPIC_CONFIGS = {"cleanup.policy": "compact"}  # a fingerprint's schema never changes: keep one each
_LOOKUP_EVERY_S = 1.0  # an unknown fingerprint reads the topic again at most this often


class SchemaRegistry:
    """One client's view of the registry topic. Thread-safe; no I/O until first used."""

    def __init__(
        self,
        kafka: KafkaConfig,
        topic: str,
        admin: TopicAdmin,
        appender: Callable[[], Appender],
        timeout_s: float,
    ) -> None:
        self._kafka = kafka
        self._topic = topic
        self._admin = admin
        self._appender = appender
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._reading = threading.Lock()  # one read of the topic at a time
        self._known: dict[str, dict[str, Any]] = {}  # fingerprint -> schema, read or registered
        self._registered: set[str] = set()
        self._looked_up: dict[str, float] = {}  # fingerprint -> when last missed
        self._checked = False  # the topic's cleanup.policy (_check_topic)

    def register(self, schema: dict[str, Any]) -> None:
        """Store ``schema`` (a producer's writer schema) once. Raises ``StoreError`` if it cannot."""
        fp = avro_fingerprint(schema)
        with self._lock:
            if fp in self._registered:
                return
        self._admin.ensure_topic(self._topic, 1, _TOPIC_CONFIGS)
        self._check_topic()
        value = json.dumps(schema, sort_keys=True, separators=(",", ":")).encode()
        key = f"avro/{fp}/{hashlib.sha256(value).hexdigest()[:16]}".encode()
        written = self._appender().append(self._topic, 0, value, key=key)
        try:
            written.result(self._timeout_s)
        except TimeoutError:
            raise BrokerUnavailableError(
                f"schema not stored in {self._topic} within {self._timeout_s}s"
            ) from None
        with self._lock:
            self._registered.add(fp)
            self._known[fp] = schema

    def _check_topic(self) -> None:
        """Once: a registry topic made beforehand (auto-creation, an operator) with time retention
        lost its schemas, and readers of older messages got ``IncompatibleSchema`` (a producer
        registers each schema once per process). It is made compact-only, as one made here."""
        with self._lock:
            if self._checked:
                return
            self._checked = True
        self._admin.align_owned(
            self._topic,
            _TOPIC_CONFIGS,
            "schema registry",
            "schemas it deleted before are registered again by their producers' next processes",
        )

    def lookup(self, fp: str) -> dict[str, Any] | None:
        """The writer schema with fingerprint ``fp``, or None if none is registered (or the registry
        cannot be read now: logged). Callers at the same time wait for one read of the topic."""
        found, recent = self._cached(fp)
        if found is not None or recent:
            return found
        with self._reading:
            found, recent = self._cached(fp)  # read meanwhile by the caller this one waited for
            if found is not None or recent:
                return found
            try:
                table = replay_compacted(self._kafka, self._topic, 0, timeout=self._timeout_s)
            except StoreError as exc:
                log.warning("cannot read the schema registry %s: %s", self._topic, exc)
                table = {}
            candidates: dict[str, dict[str, dict[str, Any]]] = {}  # fp -> decoding form -> schema
            for key, rec in table.items():
                verified = _verified(key, rec.value)
                if verified is not None:
                    candidates.setdefault(verified[0], {})[_decoding_form(verified[1])] = verified[1]
            with self._lock:
                for cfp, forms in candidates.items():
                    if cfp in self._registered:
                        continue  # this client wrote it: it knows the real one
                    if len(forms) > 1:
                        # Schemas differing in what decoding uses (logical types, scale, ...) but not
                        # in the fingerprint, which ignores them: one of them was forged. Guessing
                        # could misread values, so neither is used.
                        log.error(
                            "schema registry has %d different schemas for %s; none used", len(forms), cfp
                        )
                        self._known.pop(cfp, None)
                    else:
                        self._known.setdefault(cfp, next(iter(forms.values())))
                found = self._known.get(fp)
                if found is None:
                    self._looked_up[fp] = time.monotonic()
                return found

    def _cached(self, fp: str) -> tuple[dict[str, Any] | None, bool]:
        """The schema if known, and whether a read found no such schema less than a second ago
        (a stream of such messages does not read the topic for each)."""
        with self._lock:
            missed = self._looked_up.get(fp)
            recent = missed is not None and time.monotonic() - missed < _LOOKUP_EVERY_S
            return self._known.get(fp), recent


def _decoding_form(schema: dict[str, Any]) -> str:
    """What of ``schema`` decoding uses beyond its fingerprint (the Parsing Canonical Form, equal for
    every schema filed under one fingerprint): the logical types (with a decimal's precision and
    scale), in the order they appear. Registrations of one fingerprint that differ in these cannot
    both be real; differences in anything else (documentation, defaults, ``{"type": "long"}`` for
    ``"long"``, custom properties) do not change a decoded value."""
    found: list[tuple[Any, Any, Any]] = []
    stack: list[Any] = [schema]
    while stack:  # iterative: a forged schema may nest deeply
        node = stack.pop()
        if isinstance(node, dict):
            if "logicalType" in node:
                found.append((node.get("logicalType"), node.get("precision"), node.get("scale")))
            for key in ("type", "fields", "items", "values"):
                child = node.get(key)
                if isinstance(child, dict | list):
                    stack.append(child)
        elif isinstance(node, list):
            stack.extend(reversed(node))
    return json.dumps(found, default=str)


def _verified(key: bytes, value: bytes | None) -> tuple[str, dict[str, Any]] | None:
    """The fingerprint and schema of a registry record, if it is one and its content has the
    fingerprint and hash its key names."""
    try:
        kind, fp, digest = key.decode().split("/")
        if kind != "avro" or value is None:
            raise ValueError("not an Avro schema record")
        if hashlib.sha256(value).hexdigest()[:16] != digest:
            raise ValueError("its content does not have the hash it is filed under")
        schema = json.loads(value)
        if not isinstance(schema, dict) or avro_fingerprint(schema) != fp:
            raise ValueError("its content does not have the fingerprint it is filed under")
    except Exception as exc:  # bad UTF-8, JSON, Avro: whoever wrote it, it is not trusted
        log.warning("schema registry record %r ignored: %s", key[:80], exc)
        return None
    return fp, schema
