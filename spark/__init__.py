"""Spark integration: committed-only reads of pulsar-txn topics and transactional writes."""
