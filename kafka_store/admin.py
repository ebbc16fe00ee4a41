"""Topic administration: idempotent create with partitions and configs, partition counts."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping
from concurrent.futures import Future, InvalidStateError

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from kafka_store._clients import kafka_error_of, make_client, wait_future
from kafka_store.config import KafkaConfig, admin_conf
from kafka_store.errors import BrokerUnavailableError, StoreError, TopicNotFoundError

log = logging.getLogger(__name__)

_DEFAULT_POLICY = "delete"  # Kafka's cleanup.policy for a topic that sets none


class TopicAdmin:
    """Creates and inspects topics. No network I/O until a method is called."""

    def __init__(self, config: KafkaConfig) -> None:
        self._config = config
        self._client: AdminClient | None = None
        # Requests answered through callbacks (delete_records_before) that have no answer yet: an
        # admin dropped meanwhile takes its client and their answers with it, so they fail then.
        self._unanswered: set[Future[None]] = set()
        weakref.finalize(self, _fail_unanswered, self._unanswered)

    @property
    def _admin(self) -> AdminClient:
        if self._client is None:
            self._client = make_client(AdminClient, admin_conf(self._config), "Kafka admin client")
        return self._client

    @property
    def config(self) -> KafkaConfig:
        return self._config

    def close(self) -> None:
        """Let the admin client go now (its broker connections and threads): confluent-kafka has no
        close for it, and an owner in a reference cycle would keep it until the garbage collector
        ran. A later call makes a new one."""
        self._client = None

    @property
    def _timeout(self) -> float:
        return self._config.request_timeout_ms / 1000

    def ensure_topic(self, name: str, partitions: int, configs: Mapping[str, str] | None = None) -> int:
        """Create the topic if missing; return its partition count (existing topics are left as they are)."""
        try:
            futures = self._admin.create_topics(
                [NewTopic(name, partitions, self._config.replication_factor, config=dict(configs or {}))],
                request_timeout=self._timeout,
            )
        except (ValueError, TypeError) as exc:  # confluent's own argument checks (e.g. partitions < 1)
            raise StoreError(f"create topic {name}: {exc}") from None
        try:
            wait_future(futures[name], self._timeout)
            log.info("created topic %s with %d partitions", name, partitions)
        except KafkaException as exc:
            err = kafka_error_of(exc)
            if err is None or err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise self._translate(exc, f"create topic {name}") from None
        except Exception as exc:  # concurrent.futures.TimeoutError and friends
            # A TimeoutError says nothing (str() is ""): name the cluster that did not answer.
            raise BrokerUnavailableError(
                f"create topic {name}: {str(exc) or type(exc).__name__}: {self._no_answer()}"
            ) from None
        return self.partition_count(name)

    def add_partitions(self, name: str, total: int) -> None:
        """Grow the topic to ``total`` partitions; one that has them already is left as it is."""
        try:
            futures = self._admin.create_partitions(
                [NewPartitions(name, total)], request_timeout=self._timeout
            )
        except (ValueError, TypeError) as exc:  # confluent's own argument checks (e.g. total < 1)
            raise StoreError(f"add partitions to {name}: {exc}") from None
        try:
            wait_future(futures[name], self._timeout)
        except KafkaException as exc:
            error = self._translate(exc, f"add partitions to {name}")
            if not isinstance(error, BrokerUnavailableError) and self.partition_count(name) >= total:
                # Another process grew it first (Kafka refuses a total it has already): two consumers
                # acking in partitions added to the data topic raced, and the loser's ack failed.
                return
            raise error from None
        except TimeoutError:  # the admin future's own timeout: not a KafkaException
            raise BrokerUnavailableError.no_answer(f"add partitions to {name}", self._timeout) from None

    def topic_config(self, name: str) -> dict[str, str]:
        """The topic's configuration (DescribeConfigs): every setting with its value."""
        resource = ConfigResource(ConfigResource.Type.TOPIC, name)
        what = f"describe the configuration of {name}"
        try:
            futures = self._admin.describe_configs([resource], request_timeout=self._timeout)
            entries = wait_future(next(iter(futures.values())), self._timeout)
        except KafkaException as exc:
            raise self._translate(exc, what) from None
        except TimeoutError:
            raise BrokerUnavailableError.no_answer(what, self._timeout) from None
        return {key: entry.value for key, entry in entries.items() if entry.value is not None}

    def cleanup_policies(self, names: list[str]) -> dict[str, str]:
        """Each topic's ``cleanup.policy`` (one DescribeConfigs for all); topics that could not be
        described are left out."""
        if not names:
            return {}
        resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in names]
        try:
            futures = self._admin.describe_configs(resources, request_timeout=self._timeout)
        except KafkaException as exc:
            raise self._translate(exc, "describe topic configurations") from None
        out: dict[str, str] = {}
        for resource, future in futures.items():
            try:
                entries = wait_future(future, self._timeout)
            except (KafkaException, TimeoutError):
                continue  # e.g. deleted meanwhile
            entry = entries.get("cleanup.policy")
            out[resource.name] = entry.value if entry is not None and entry.value else _DEFAULT_POLICY
        return out

    def align_configs(self, name: str, wanted: Mapping[str, str]) -> dict[str, str]:
        """Set the settings of ``wanted`` that the existing topic ``name`` has otherwise
        (IncrementalAlterConfigs); returns what each changed one was. For the topics a component
        owns but may find made beforehand (by auto-creation, an operator or an earlier build)."""
        have = self.topic_config(name)
        changed = {k: have.get(k, "(default)") for k, v in wanted.items() if have.get(k) != v}
        if not changed:
            return {}
        resource = ConfigResource(ConfigResource.Type.TOPIC, name)
        for key in changed:
            resource.add_incremental_config(
                ConfigEntry(key, wanted[key], incremental_operation=AlterConfigOpType.SET)
            )
        what = f"alter the configuration of {name}"
        try:
            futures = self._admin.incremental_alter_configs([resource], request_timeout=self._timeout)
            wait_future(next(iter(futures.values())), self._timeout)
        except KafkaException as exc:
            raise self._translate(exc, what) from None
        except TimeoutError:
            raise BrokerUnavailableError.no_answer(what, self._timeout) from None
        return changed

    def align_owned(self, name: str, wanted: Mapping[str, str], what: str, consequence: str) -> None:
        """``align_configs`` for a topic a component owns, each outcome logged rather than raised:
        a setting it had otherwise (``consequence``: what that may have cost already), or a broker
        that refused the check or the change."""
        try:
            changed = self.align_configs(name, wanted)
        except StoreError as exc:
            needs = ", ".join(f"{k}={v}" for k, v in sorted(wanted.items()))
            log.warning("cannot check the settings of %s %s (it needs %s): %s", what, name, needs, exc)
            return
        if changed:
            log.warning(
                "%s %s had %s; set to %s (%s)",
                what,
                name,
                ", ".join(f"{k}={v}" for k, v in sorted(changed.items())),
                ", ".join(f"{k}={wanted[k]}" for k in sorted(changed)),
                consequence,
            )

    def cleanup_policy(self, name: str) -> str:
        """The topic's ``cleanup.policy`` (Kafka's default, ``delete``, if it names none)."""
        return self.topic_config(name).get("cleanup.policy", _DEFAULT_POLICY)

    def partition_count(self, name: str) -> int:
        try:
            meta = self._admin.list_topics(topic=name, timeout=self._timeout)
        except KafkaException as exc:
            raise self._translate(exc, f"describe {name}") from None
        topic = meta.topics.get(name)
        if topic is None or topic.error is not None or not topic.partitions:
            raise TopicNotFoundError(f"topic {name} does not exist")
        return len(topic.partitions)

    def topic_exists(self, name: str) -> bool:
        try:
            self.partition_count(name)
        except TopicNotFoundError:
            return False
        return True

    def list_topics(self) -> list[str]:
        try:
            meta = self._admin.list_topics(timeout=self._timeout)
        except KafkaException as exc:
            raise self._translate(exc, "list topics") from None
        return sorted(meta.topics)

    def delete_topics(self, names: list[str]) -> None:
        if not names:
            return
        futures = self._admin.delete_topics(names, request_timeout=self._timeout)
        for name, fut in futures.items():
            try:
                wait_future(fut, self._timeout)
            except KafkaException as exc:
                err = kafka_error_of(exc)
                if err is None or err.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise self._translate(exc, f"delete {name}") from None
            except TimeoutError:
                raise BrokerUnavailableError.no_answer(f"delete {name}", self._timeout) from None

    def delete_records_before(self, topic: str, partition: int, offset: int) -> Future[None]:
        """Kafka's DeleteRecords: move the partition's log start up to ``offset`` (the records below it
        are gone for every reader). Does not wait: the future ends with the broker's answer, failing
        with ``StoreError``."""
        done: Future[None] = Future()
        unanswered = self._unanswered
        try:
            futures = self._admin.delete_records(
                [TopicPartition(topic, partition, offset)], request_timeout=self._timeout
            )
        except (KafkaException, ValueError, TypeError) as exc:
            done.set_exception(StoreError(f"delete records of {topic}[{partition}] below {offset}: {exc}"))
            return done
        (answer,) = futures.values()
        unanswered.add(done)
        no_answer = self._no_answer()

        # Holds no reference to this TopicAdmin: if the callback's thread (librdkafka's) dropped the
        # last one, the AdminClient would be destroyed there, which librdkafka aborts the process on.
        def answered(fut: Future[object]) -> None:
            unanswered.discard(done)
            exc = fut.exception()
            if exc is None:
                outcome: StoreError | None = None
            elif isinstance(exc, KafkaException):
                outcome = _translate(exc, f"delete records of {topic}[{partition}]", no_answer)
            else:
                outcome = StoreError(f"delete records of {topic}[{partition}]: {exc}")
            try:
                if outcome is None:
                    done.set_result(None)
                else:
                    done.set_exception(outcome)
            except InvalidStateError:  # failed already: the admin was dropped first
                pass

        answer.add_done_callback(answered)
        return done

    def _translate(self, exc: KafkaException, what: str) -> StoreError:
        return _translate(exc, what, self._no_answer())

    def _no_answer(self) -> str:
        return f"no answer from Kafka at {self._config.bootstrap_servers} in {self._timeout:g} s"


def _translate(exc: KafkaException, what: str, no_answer: str) -> StoreError:
    """``no_answer`` is added to a dead-broker error: librdkafka's own words ("Failed while waiting
    for controller") do not name the cluster."""
    err = kafka_error_of(exc)
    if err is None:
        return StoreError(f"{what}: {exc}")
    if err.code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN):
        return BrokerUnavailableError(f"{what}: {err.str()}: {no_answer}")
    if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return TopicNotFoundError(f"{what}: {err.str()}")
    return StoreError(f"{what}: {err.str()}", retriable=bool(err.retriable()))


def _fail_unanswered(unanswered: set[Future[None]]) -> None:
    """A TopicAdmin was dropped with requests in flight: its client is destroyed with them, and no
    answer will come."""
    for done in list(unanswered):
        try:
            done.set_exception(StoreError("the topic admin was dropped before its request was answered"))
        except InvalidStateError:
            pass
    unanswered.clear()
