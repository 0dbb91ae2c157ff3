"""An asyncio face for :class:`~tidegate.producer.Producer`.

The producer already does its I/O on its own sender thread, so the asyncio flavour
is a thin adapter: delivery results are handed to the event loop with
``call_soon_threadsafe``, and the calls that can wait long (the first metadata
lookup of a topic, ``flush``, ``close``) run in a worker thread. ::

    async with AIOProducer({"bootstrap.servers": "127.0.0.1:9092"}) as p:
        md = await p.send_and_wait("events", b"value", key=b"k")
        fut = await p.send("events", b"more")      # an asyncio.Future
        await p.flush()

``send`` itself still runs on the loop: it blocks only while ``buffer.memory`` is
exhausted (at most ``max.block.ms``), as the threaded producer does.

Transactions (``transactional.id``) as on :class:`~tidegate.producer.Producer`; the calls
that wait for the coordinator are coroutines, ``begin_transaction`` (local) is not::

    async with AIOProducer({"bootstrap.servers": ..., "transactional.id": "t-1"}) as p:
        await p.init_transactions()
        p.begin_transaction()
        await p.send("events", b"value")
        await p.commit_transaction()
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from .batch import RecordMetadata
from .producer import Producer
from .transaction_manager import ConsumerGroupMetadata

__all__ = ["AIOProducer"]


def _resolve(fut: asyncio.Future, md: RecordMetadata | None, err: BaseException | None) -> None:
    if fut.done():
        return
    if err is not None:
        fut.set_exception(err)
    else:
        fut.set_result(md)


class AIOProducer:
    def __init__(self, config: Mapping[str, Any], **kw: Any) -> None:
        self.producer = Producer(config, **kw)
        self._known: set[str] = set()

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: Any = None,
        timestamp: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue a record; returns an ``asyncio.Future`` of its :class:`RecordMetadata`."""
        loop = asyncio.get_running_loop()
        if topic not in self._known:
            await loop.run_in_executor(None, self.producer.partitions_for, topic)
            self._known.add(topic)
        fut: asyncio.Future[RecordMetadata] = loop.create_future()

        def deliver(md: RecordMetadata | None, err: BaseException | None) -> None:
            loop.call_soon_threadsafe(_resolve, fut, md, err)

        self.producer.send(topic, value, key, partition, headers, timestamp, on_delivery=deliver)
        return fut

    async def send_and_wait(self, topic: str, value: Any = None, **kw: Any) -> RecordMetadata:
        return await (await self.send(topic, value, **kw))

    # -- transactions (Producer's, with the waits in a worker thread) --------------------------

    async def init_transactions(self, timeout: float | None = None) -> None:
        await asyncio.get_running_loop().run_in_executor(
            None, self.producer.init_transactions, timeout
        )

    def begin_transaction(self) -> None:
        self.producer.begin_transaction()

    async def send_offsets_to_transaction(
        self,
        offsets: Any,
        group_metadata: ConsumerGroupMetadata | str,
        timeout: float | None = None,
    ) -> None:
        await asyncio.get_running_loop().run_in_executor(
            None, self.producer.send_offsets_to_transaction, offsets, group_metadata, timeout
        )

    async def commit_transaction(self, timeout: float | None = None) -> None:
        await asyncio.get_running_loop().run_in_executor(
            None, self.producer.commit_transaction, timeout
        )

    async def abort_transaction(self, timeout: float | None = None) -> None:
        await asyncio.get_running_loop().run_in_executor(
            None, self.producer.abort_transaction, timeout
        )

    async def flush(self, timeout: float | None = None) -> int:
        return await asyncio.get_running_loop().run_in_executor(None, self.producer.flush, timeout)

    async def close(self, timeout: float | None = None) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.producer.close, timeout)

    def metrics(self) -> dict[str, float]:
        return self.producer.metrics()

    async def __aenter__(self) -> AIOProducer:  # noqa: PYI034
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
