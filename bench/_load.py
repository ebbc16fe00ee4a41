"""Client load in separate processes (multiprocessing, spawn), so Python on the client side does not
starve the measurement. Each process runs one ``TcClient`` shared by its asyncio tasks.

Modes (``LoadSpec.mode``):
  closed  every task loops new_txn -> add 1 partition -> commit as fast as it can;
  paced   open-loop: slot k of this process is due at ``t0 + phase + k / rate``; a free task takes the
          next slot, sleeps until it is due and runs one transaction (lateness is reported);
  open    only new_txn (long TTL) until ``max_txns`` are open; nothing is ever ended.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing as mp
import queue
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event as MpEvent
from typing import TYPE_CHECKING, Any, Literal

from pulsar_txn.errors import PulsarTxnError
from pulsar_txn.tc_client import TcClient
from pulsar_txn.txnid import TxnAction

if TYPE_CHECKING:
    from bench._common import CpuProbe

Mode = Literal["closed", "paced", "open"]


@dataclass(frozen=True)
class LoadSpec:
    url: str
    num_tcs: int
    mode: Mode
    tasks: int
    partitions: tuple[str, ...] = ()
    warmup_s: float = 1.0
    duration_s: float = 5.0
    max_txns: int = 200_000  # per process, whatever the mode
    rate: float = 0.0  # paced: transactions/s of this process
    phase_s: float = 0.0  # paced: offset of this process's slots
    ttl_ms: int = 60_000
    time_limit_s: float = 120.0  # open: give up after this long


@dataclass
class LoadResult:
    completed: int = 0  # transactions that finished inside the measurement window
    window_s: float = 0.0
    end_ms: list[float] = field(default_factory=list)  # END_TXN call latency
    txn_ms: list[float] = field(default_factory=list)  # begin -> committed (paced: from the due time)
    late_ms: list[float] = field(default_factory=list)  # paced: start minus due time
    errors: dict[str, int] = field(default_factory=dict)
    opened: int = 0  # open mode
    elapsed_s: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)  # filled in by the parent (CpuProbe)

    def merge(self, other: LoadResult) -> None:
        self.completed += other.completed
        self.window_s = max(self.window_s, other.window_s)
        self.end_ms += other.end_ms
        self.txn_ms += other.txn_ms
        self.late_ms += other.late_ms
        self.errors = dict(Counter(self.errors) + Counter(other.errors))
        self.opened += other.opened
        self.elapsed_s = max(self.elapsed_s, other.elapsed_s)


class _Run:
    def __init__(self, client: TcClient, spec: LoadSpec) -> None:
        self.client = client
        self.spec = spec
        self.result = LoadResult(window_s=spec.duration_s)
        self.errors: Counter[str] = Counter()
        self.started = 0
        self.t0 = time.perf_counter()
        self.warm_end = self.t0 + spec.warmup_s
        self.end = self.warm_end + spec.duration_s

    async def one_txn(self, partition: str) -> tuple[float, float, float] | None:
        """begin -> add partition -> commit; (start, before END_TXN, done) or None on error."""
        t0 = time.perf_counter()
        try:
            txn = await self.client.new_txn(self.spec.ttl_ms)
            await self.client.add_partitions(txn, [partition])
            t1 = time.perf_counter()
            await self.client.end_txn(txn, TxnAction.COMMIT)
        except PulsarTxnError as exc:
            self.errors[type(exc).__name__] += 1
            await asyncio.sleep(0.01)
            return None
        return t0, t1, time.perf_counter()

    def record(self, t0: float, t1: float, t2: float, origin: float) -> None:
        if self.warm_end <= t2 <= self.end:
            self.result.completed += 1
            if t0 >= self.warm_end:
                self.result.end_ms.append((t2 - t1) * 1000)
                self.result.txn_ms.append((t2 - origin) * 1000)

    async def closed_task(self, index: int) -> None:
        partition = self.spec.partitions[index % len(self.spec.partitions)]
        while time.perf_counter() < self.end and self.started < self.spec.max_txns:
            self.started += 1
            times = await self.one_txn(partition)
            if times is not None:
                self.record(*times, origin=times[0])

    async def paced_task(self, index: int, slots: itertools.count[int]) -> None:
        partition = self.spec.partitions[index % len(self.spec.partitions)]
        base = self.t0 + self.spec.phase_s
        while self.started < self.spec.max_txns:
            due = base + next(slots) / self.spec.rate
            if due > self.end:
                return
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            self.started += 1
            times = await self.one_txn(partition)
            if times is not None:
                self.record(*times, origin=due)
                if due >= self.warm_end:
                    self.result.late_ms.append((times[0] - due) * 1000)

    async def open_task(self) -> None:
        deadline = self.t0 + self.spec.time_limit_s
        while self.started < self.spec.max_txns and time.perf_counter() < deadline:
            self.started += 1
            try:
                await self.client.new_txn(self.spec.ttl_ms)
                self.result.opened += 1
            except PulsarTxnError as exc:
                self.errors[type(exc).__name__] += 1
                await asyncio.sleep(0.01)

    async def run(self) -> LoadResult:
        slots = itertools.count()
        if self.spec.mode == "closed":
            coros = [self.closed_task(i) for i in range(self.spec.tasks)]
        elif self.spec.mode == "paced":
            coros = [self.paced_task(i, slots) for i in range(self.spec.tasks)]
        else:
            coros = [self.open_task() for _ in range(self.spec.tasks)]
        await asyncio.gather(*coros)
        self.result.elapsed_s = time.perf_counter() - self.t0
        self.result.errors = dict(self.errors)
        return self.result


async def _worker(spec: LoadSpec, index: int, out: Any, go: MpEvent) -> None:
    client = TcClient(spec.url, num_tcs=spec.num_tcs, operation_timeout=15.0)
    try:
        await client.connect()
        for tc in range(spec.num_tcs):  # look up and connect to every TC before the clock starts
            await client.end_txn(await client.new_txn(spec.ttl_ms, tc_id=tc), TxnAction.ABORT)
        out.put(("ready", index, None))
        loop = asyncio.get_running_loop()
        if not await loop.run_in_executor(None, go.wait, 120.0):
            raise TimeoutError("no go signal from the parent")
        result = await _Run(client, spec).run()
        out.put(("result", index, result))
    finally:
        await client.close()


def _worker_main(spec: LoadSpec, index: int, out: Any, go: MpEvent) -> None:
    try:
        asyncio.run(_worker(spec, index, out, go))
    except KeyboardInterrupt:
        pass
    except BaseException:
        out.put(("error", index, traceback.format_exc()))


def split(total: int, parts: int = 2) -> list[int]:
    """``total`` tasks over at most ``parts`` processes, dropping empty ones (1 -> [1], 64 -> [32, 32])."""
    return [n for n in (total // parts + (1 if i < total % parts else 0) for i in range(parts)) if n]


def run_load(specs: list[LoadSpec], timeout: float, probe: CpuProbe | None = None) -> LoadResult:
    """Run one process per spec, start them together once all are connected, merge their results.
    ``probe`` (if given) measures CPU from the go signal until the last result arrived."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    go = ctx.Event()
    procs = [
        ctx.Process(target=_worker_main, args=(spec, i, out, go), daemon=True, name=f"bench-load-{i}")
        for i, spec in enumerate(specs)
    ]
    merged = LoadResult()
    try:
        for i, p in enumerate(procs):
            p.start()
            if probe is not None and p.pid is not None:
                probe.add(f"client{i}", p.pid)
        deadline = time.monotonic() + 60.0
        for want in ("ready", "result"):
            if want == "result":
                go.set()
                if probe is not None:
                    probe.start()
                deadline = time.monotonic() + timeout
            pending = set(range(len(procs)))
            dead_since: float | None = None
            while pending:
                try:
                    kind, index, payload = out.get(timeout=0.5)
                except queue.Empty:
                    # A worker that exited without its answer (killed, Ctrl-C) fails the run; allow its
                    # last message a moment to arrive through the pipe first.
                    dead = [procs[i].name for i in pending if not procs[i].is_alive()]
                    now = time.monotonic()
                    dead_since = (dead_since or now) if dead else None
                    if (dead_since is not None and now - dead_since > 2.0) or now > deadline:
                        why = f"{dead} exited" if dead else "timed out"
                        raise RuntimeError(f"load workers failed: {why} waiting for {want}") from None
                    continue
                if kind == "error":
                    raise RuntimeError(f"load worker {index} failed:\n{payload}")
                if kind == want:
                    pending.discard(index)
                    if kind == "result":
                        merged.merge(payload)
        if probe is not None:
            merged.cpu = probe.stop()
        for p in procs:
            p.join(10)
        return merged
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)
        out.close()
