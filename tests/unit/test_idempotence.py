"""InitProducerId and idempotent Produce through KafkaApis, sans-IO (the CoreHarness of
test_apis): producer ids persisted and never reused, retries answered with the original
offsets and not written, OUT_OF_ORDER_SEQUENCE_NUMBER for gaps, INVALID_PRODUCER_EPOCH for
fenced epochs, and the state surviving a restart, a crash and a torn tail."""

from __future__ import annotations

import os

import pytest

from tests.core_harness import CoreHarness
from tests.unit.test_apis import FETCH, NOW, PRODUCE, batches_in, produce_body
from tidegate.coordinator.transaction.producer_id_manager import (
    BLOCK_SIZE,
    PRODUCER_ID_BLOCK_FILE,
    ProducerIdBlockError,
    ProducerIdManager,
)
from tidegate.errors import ErrorCode
from tidegate.protocol.apis import SUPPORTED_APIS
from tidegate.record.batch_builder import Record, build_batch

INIT_PRODUCER_ID = 22
TOPIC = "idem"


pytestmark = pytest.mark.harness(topics={TOPIC: 2})


def init_pid(h, version=4, transactional_id=None, producer_id=-1, producer_epoch=-1):
    body = {
        "transactional_id": transactional_id,
        "transaction_timeout": 60_000,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
    }
    return h.request(INIT_PRODUCER_ID, version, body)


def idem_batch(pid, seq, n=1, epoch=0, tag=b"r", **kw):
    recs = [Record(b"%s-%d" % (tag, seq + i), key=b"k", timestamp=NOW) for i in range(n)]
    return build_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq, **kw)


def fetch_all(h, partition=0):
    body = {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 50_000_000,
        "isolation_level": 0,
        "topics": [
            {
                "topic": TOPIC,
                "partitions": [
                    {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 50_000_000}
                ],
            }
        ],
    }
    resp = h.request(FETCH, 11, body)
    return batches_in(resp.responses[0].partitions[0].records)


# -- InitProducerId ---------------------------------------------------------------------


def test_init_producer_id_is_advertised_at_versions_0_to_5():
    r = SUPPORTED_APIS[INIT_PRODUCER_ID]
    assert (r.min_version, r.max_version) == (0, 5)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 5])
def test_every_version_hands_out_new_ids_with_epoch_0(h, version):
    a = init_pid(h, version)
    b = init_pid(h, version)
    assert a.error_code == b.error_code == ErrorCode.none
    assert a.producer_epoch == b.producer_epoch == 0
    assert 0 <= a.producer_id < b.producer_id


def test_a_request_with_the_current_id_and_epoch_gets_a_fresh_id(h):
    """Kafka's coordinator ignores producer_id/epoch when there is no transactional id
    and hands out a new id at epoch 0; clients (librdkafka, kafka-python's KIP-360 path)
    take whatever comes back."""
    first = init_pid(h)
    again = init_pid(h, version=4, producer_id=first.producer_id, producer_epoch=0)
    assert again.error_code == ErrorCode.none
    assert again.producer_id > first.producer_id and again.producer_epoch == 0


@pytest.mark.parametrize("pid, epoch", [(5, -1), (-1, 3)])
def test_producer_id_and_epoch_come_together_or_not_at_all(h, pid, epoch):
    resp = init_pid(h, version=3, producer_id=pid, producer_epoch=epoch)
    assert resp.error_code == ErrorCode.invalid_request
    assert resp.producer_id == -1


@pytest.mark.parametrize("version", [0, 2, 5])
def test_transactional_ids_are_served_by_the_transaction_coordinator(h, version):
    body = {"transactional_id": "tx-1", "transaction_timeout": 60_000, "producer_id": -1,
            "producer_epoch": -1}
    resp = h.request_parked(INIT_PRODUCER_ID, version, body, within_ms=1000)
    assert resp.error_code == ErrorCode.none
    assert (resp.producer_id, resp.producer_epoch) == (0, 0)
    assert init_pid(h, version, transactional_id="").error_code == ErrorCode.invalid_request


def test_ids_are_never_reused_across_restarts(tmp_path):
    root = tmp_path / "data"
    h1 = CoreHarness(root)
    ids = [init_pid(h1).producer_id for _ in range(3)]
    assert ids == [0, 1, 2]
    assert (root / PRODUCER_ID_BLOCK_FILE).read_text() == f"version: 0\nnext_block_start: {BLOCK_SIZE}\n"
    h1.close()
    h2 = CoreHarness(root)  # a restart (or a kill -9: the block was recorded before use)
    nxt = init_pid(h2).producer_id
    assert nxt == BLOCK_SIZE  # the rest of the first block is skipped, never reused
    h2.close()


def test_blocks_are_recorded_before_their_first_id_is_used(tmp_path):
    m = ProducerIdManager(tmp_path, block_size=3)
    assert [m.generate() for _ in range(7)] == list(range(7))
    assert m.next_block_start == 9
    assert ProducerIdManager(tmp_path, block_size=3).generate() == 9


def test_a_damaged_block_file_stops_the_broker_rather_than_guess(tmp_path):
    (tmp_path / PRODUCER_ID_BLOCK_FILE).write_text("version: 0\nnext_block_start: x\n")
    with pytest.raises(ProducerIdBlockError):
        ProducerIdManager(tmp_path)


def test_a_block_that_cannot_be_recorded_is_a_retriable_error(h, monkeypatch):
    def full(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("tidegate.coordinator.transaction.producer_id_manager.write_atomically", full)
    resp = init_pid(h)
    assert resp.error_code == ErrorCode.coordinator_load_in_progress
    assert resp.producer_id == -1


# -- Produce with a producer id -----------------------------------------------------------


def test_a_retried_batch_gets_the_original_offset_and_is_not_written(h):
    pid = init_pid(h).producer_id
    first = h.produce(TOPIC, 0, idem_batch(pid, 0, 3))
    other = h.produce(TOPIC, 0, build_batch([Record(b"not idempotent")]))
    second = h.produce(TOPIC, 0, idem_batch(pid, 3, 2))
    assert (first.base_offset, other.base_offset, second.base_offset) == (0, 3, 4)
    for seq, n, offset in ((0, 3, 0), (3, 2, 4), (0, 3, 0)):
        again = h.produce(TOPIC, 0, idem_batch(pid, seq, n))
        assert again.error_code == ErrorCode.none  # not DUPLICATE_SEQUENCE_NUMBER: Kafka >= 1.0
        assert again.base_offset == offset
    assert h.replicas.get_log(TOPIC, 0).log_end_offset == 6
    assert [b[0] for b in fetch_all(h)] == [0, 3, 4]  # one copy of each


def test_a_retry_with_acks_all_waits_for_the_original_and_gets_its_offset(h):
    pid = init_pid(h).producer_id
    assert h.produce(TOPIC, 0, idem_batch(pid, 0, 2)).base_offset == 0
    body = produce_body(TOPIC, {0: idem_batch(pid, 0, 2)}, acks=-1)
    resp = h.request_parked(PRODUCE, 9, body)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.none and part.base_offset == 0
    assert h.replicas.get_log(TOPIC, 0).recovery_point >= 2


def test_the_last_five_batches_are_recognised_older_ones_are_out_of_order(h):
    pid = init_pid(h).producer_id
    offsets = [h.produce(TOPIC, 0, idem_batch(pid, seq)).base_offset for seq in range(8)]
    for seq in range(3, 8):
        assert h.produce(TOPIC, 0, idem_batch(pid, seq)).base_offset == offsets[seq]
    stale = h.produce(TOPIC, 0, idem_batch(pid, 2))
    assert stale.error_code == ErrorCode.out_of_order_sequence_number
    assert h.replicas.get_log(TOPIC, 0).log_end_offset == 8


def test_a_gap_is_out_of_order_and_writes_nothing(h):
    pid = init_pid(h).producer_id
    h.produce(TOPIC, 0, idem_batch(pid, 0, 2))
    gap = h.produce(TOPIC, 0, idem_batch(pid, 3))
    assert gap.error_code == ErrorCode.out_of_order_sequence_number == 45
    assert gap.base_offset == -1 and "out of order" in gap.error_message
    assert h.replicas.get_log(TOPIC, 0).log_end_offset == 2
    assert h.produce(TOPIC, 0, idem_batch(pid, 2)).base_offset == 2


def test_sequences_are_per_partition(h):
    pid = init_pid(h).producer_id
    assert h.produce(TOPIC, 0, idem_batch(pid, 0, 2)).base_offset == 0
    assert h.produce(TOPIC, 1, idem_batch(pid, 0, 2)).base_offset == 0
    assert h.produce(TOPIC, 1, idem_batch(pid, 2)).error_code == ErrorCode.none


def test_an_older_epoch_is_fenced(h):
    pid = init_pid(h).producer_id
    h.produce(TOPIC, 0, idem_batch(pid, 0, epoch=1))
    fenced = h.produce(TOPIC, 0, idem_batch(pid, 1, epoch=0))
    assert fenced.error_code == ErrorCode.invalid_producer_epoch == 47
    assert h.replicas.get_log(TOPIC, 0).log_end_offset == 1


def test_a_new_epoch_restarts_at_sequence_zero(h):
    """What the Java client does after an error: bump the epoch locally, start at 0."""
    pid = init_pid(h).producer_id
    h.produce(TOPIC, 0, idem_batch(pid, 0, 3))
    bad = h.produce(TOPIC, 0, idem_batch(pid, 3, epoch=1))
    assert bad.error_code == ErrorCode.out_of_order_sequence_number
    assert h.produce(TOPIC, 0, idem_batch(pid, 0, epoch=1)).base_offset == 3
    assert h.produce(TOPIC, 0, idem_batch(pid, 1, epoch=1)).base_offset == 4


def test_transactional_batches_without_a_transactional_id_are_refused(h):
    pid = init_pid(h).producer_id
    body = produce_body(TOPIC, {0: idem_batch(pid, 0, transactional=True), 1: idem_batch(pid, 0)})
    parts = h.request(PRODUCE, 9, body).responses[0].partition_responses
    # the whole request, as Kafka answers it
    assert [p.error_code for p in parts] == [ErrorCode.transactional_id_authorization_failed] * 2
    assert h.replicas.get_log(TOPIC, 0).log_end_offset == 0
    assert h.replicas.get_log(TOPIC, 1).log_end_offset == 0


def test_other_partitions_of_a_request_are_unaffected_by_a_rejected_one(h):
    pid = init_pid(h).producer_id
    h.produce(TOPIC, 0, idem_batch(pid, 0))
    body = produce_body(TOPIC, {0: idem_batch(pid, 5), 1: idem_batch(pid, 0)})
    parts = h.request(PRODUCE, 9, body).responses[0].partition_responses
    assert [p.error_code for p in parts] == [ErrorCode.out_of_order_sequence_number, ErrorCode.none]


# -- restarts ---------------------------------------------------------------------------------


def test_dedup_survives_a_clean_restart(tmp_path):
    root = tmp_path / "data"
    h1 = CoreHarness(root)
    h1.create_topic(TOPIC)
    pid = init_pid(h1).producer_id
    for seq in range(0, 6, 2):
        h1.produce(TOPIC, 0, idem_batch(pid, seq, 2))
    h1.close()
    h2 = CoreHarness(root)
    assert h2.replicas.get_log(TOPIC, 0).producer_state_replayed_batches == 0
    assert h2.produce(TOPIC, 0, idem_batch(pid, 2, 2)).base_offset == 2
    assert h2.produce(TOPIC, 0, idem_batch(pid, 7)).error_code == ErrorCode.out_of_order_sequence_number
    assert h2.produce(TOPIC, 0, idem_batch(pid, 6)).base_offset == 6
    assert [b[0] for b in fetch_all(h2)] == [0, 2, 4, 6]
    h2.close()


def test_dedup_survives_a_crash_across_segment_rolls(tmp_path):
    root = tmp_path / "data"
    h1 = CoreHarness(root)
    h1.create_topic(TOPIC, configs={"segment.bytes": "400"})
    pid = init_pid(h1).producer_id
    offsets = [h1.produce(TOPIC, 0, idem_batch(pid, 2 * i, 2, tag=b"x" * 40)).base_offset for i in range(20)]
    assert len(h1.replicas.get_log(TOPIC, 0).segments) > 3
    h1.crash()
    h2 = CoreHarness(root)
    plog = h2.replicas.get_log(TOPIC, 0)
    assert not plog.had_clean_shutdown
    assert 0 < plog.producer_state_replayed_batches < 20  # from the last roll's snapshot
    for i in range(15, 20):
        again = h2.produce(TOPIC, 0, idem_batch(pid, 2 * i, 2, tag=b"x" * 40))
        assert again.error_code == ErrorCode.none and again.base_offset == offsets[i]
    assert plog.log_end_offset == 40
    assert init_pid(h2).producer_id >= BLOCK_SIZE  # ids of the crashed run are not reused
    h2.close()


def test_a_torn_tail_is_not_answered_as_a_duplicate(tmp_path):
    root = tmp_path / "data"
    h1 = CoreHarness(root)
    h1.create_topic(TOPIC)
    pid = init_pid(h1).producer_id
    h1.produce(TOPIC, 0, idem_batch(pid, 0, 2))
    h1.produce(TOPIC, 0, idem_batch(pid, 2, 2))  # acked, then lost with the tail
    seg = h1.replicas.get_log(TOPIC, 0).segments[-1].log_path
    h1.crash()
    os.truncate(seg, seg.stat().st_size - 5)
    h2 = CoreHarness(root)
    assert h2.replicas.get_log(TOPIC, 0).log_end_offset == 2
    retried = h2.produce(TOPIC, 0, idem_batch(pid, 2, 2))
    assert retried.error_code == ErrorCode.none and retried.base_offset == 2
    assert [b[0] for b in fetch_all(h2)] == [0, 2]
    assert h2.produce(TOPIC, 0, idem_batch(pid, 2, 2)).base_offset == 2  # now a real duplicate
    h2.close()


def test_expired_producers_are_unknown_again(h):
    pid = init_pid(h).producer_id
    h.produce(TOPIC, 0, idem_batch(pid, 0))
    h.clock.advance(86_400_000)  # a day on the wall clock since the batch's timestamp
    assert h.logs.remove_expired_producers(86_400_000) == 1
    # no state left: the retry cannot be recognised and any sequence is accepted (Kafka 2.5+)
    assert h.produce(TOPIC, 0, idem_batch(pid, 0)).base_offset == 1
    assert h.produce(TOPIC, 0, idem_batch(pid, 1)).base_offset == 2
