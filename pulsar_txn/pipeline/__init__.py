"""The exactly-once pipeline: consume, transform, produce and acknowledge in one transaction per batch.

``ExactlyOncePipeline`` is the project's main job (``pulsar-txn pipeline`` runs it against any
deployment, ``pulsar-txn demo`` against the embedded one, killing and restarting it on the way).
It can be killed at any point: a restarted instance with the same ``instance_id`` aborts what its
predecessor left open and resumes from the subscription's cursor, so the output holds every input
exactly once, in per-partition order. ``verify_exactly_once`` checks exactly that.
"""

from pulsar_txn.pipeline.app import ExactlyOncePipeline, PipelineProgress, PipelineSettings
from pulsar_txn.pipeline.fencing import PipelineFenced
from pulsar_txn.pipeline.verify import Verdict, verify_exactly_once

__all__ = [
    "ExactlyOncePipeline",
    "PipelineFenced",
    "PipelineProgress",
    "PipelineSettings",
    "Verdict",
    "verify_exactly_once",
]
