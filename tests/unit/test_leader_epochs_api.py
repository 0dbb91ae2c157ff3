"""Leader epochs on the wire: OffsetForLeaderEpoch (23), and the epoch Metadata, ListOffsets
and Fetch report and check (KIP-320), through KafkaApis on fake time."""

from __future__ import annotations

import pytest

from tests.core_harness import CoreHarness
from tests.integration.rawclient import fetch_topics_body, list_offsets_body
from tests.unit.test_apis import FETCH, LIST_OFFSETS, batch
from tidegate.errors import ErrorCode as E
from tidegate.record.batch_builder import Record, build_batch
from tidegate.record.record_batch import iter_batches, read_header

OFFSET_FOR_LEADER_EPOCH = 23


def epochs_body(parts: list[tuple[str, int, int, int]]) -> dict:
    """(topic, partition, current_leader_epoch, leader_epoch) per partition."""
    topics: dict[str, list] = {}
    for topic, partition, current, epoch in parts:
        topics.setdefault(topic, []).append(
            {"partition": partition, "current_leader_epoch": current, "leader_epoch": epoch}
        )
    return {"replica_id": -1, "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}


def end_offsets(h: CoreHarness, parts, version: int = 4) -> list[tuple]:
    resp = h.request(OFFSET_FOR_LEADER_EPOCH, version, epochs_body(parts))
    return [
        (t.topic, p.partition, p.error_code, p.leader_epoch, p.end_offset)
        for t in resp.topics
        for p in t.partitions
    ]


def fetch_one(h: CoreHarness, version: int, offset: int, *, current=-1, last_fetched=-1, topic="e"):
    """Fetch of partition 0 (by name up to v12, by topic id from v13)."""
    topic_id = h.store.get(topic).topic_id if version >= 13 else None
    body = fetch_topics_body([(topic, topic_id, [(0, offset, 1 << 20)])])
    part = body["topics"][0]["partitions"][0]
    part["current_leader_epoch"] = current
    part["last_fetched_epoch"] = last_fetched
    return h.request(FETCH, version, body)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_the_current_epoch_ends_at_the_log_end_offset(h, version):
    h.create_topic("e", 2)
    for _ in range(3):
        h.produce("e", 0, batch(b"a", b"b"))
    got = end_offsets(h, [("e", 0, 0, 0), ("e", 1, -1, 0), ("e", 0, -1, -1)], version)
    assert got == [
        ("e", 0, E.none, 0, 6),
        ("e", 1, E.none, 0, 0),  # an empty partition: its epoch began at 0
        ("e", 0, E.none, -1, -1),  # undefined epoch asked
    ]


def test_current_leader_epoch_is_checked_and_unknown_partitions_are_errors(h):
    h.create_topic("e")
    got = end_offsets(h, [("e", 0, 1, 0), ("e", 3, -1, 0), ("nope", 0, -1, 0)])
    assert got == [
        ("e", 0, E.unknown_leader_epoch, -1, -1),  # the client knows a newer leader
        ("e", 3, E.unknown_topic_or_partition, -1, -1),
        ("nope", 0, E.unknown_topic_or_partition, -1, -1),
    ]


def test_end_offsets_across_an_epoch_change(h):
    """After a leader change (here: the partition's epoch raised to 2, as a new leader
    would), the old epoch ends where the new one began; epochs in between answer with
    the last one below; a fenced client gets FENCED_LEADER_EPOCH."""
    h.create_topic("e")
    h.produce("e", 0, batch(b"a", b"b"))  # epoch 0: [0, 2)
    plog = h.replicas.get_log("e", 0)
    plog.leader_epoch = 2
    h.produce("e", 0, batch(b"c"))  # epoch 2 from offset 2
    assert plog.leader_epoch_cache.entries == [(0, 0), (2, 2)]
    data = plog.read(0, 1 << 20)
    assert [read_header(data, pos).partition_leader_epoch for pos, _ in iter_batches(data)] == [0, 2]
    got = end_offsets(h, [("e", 0, 2, 0), ("e", 0, 2, 1), ("e", 0, 2, 2), ("e", 0, 2, 3), ("e", 0, 0, 0)])
    assert got == [
        ("e", 0, E.none, 0, 2),
        ("e", 0, E.none, 0, 2),
        ("e", 0, E.none, 2, 3),
        ("e", 0, E.none, -1, -1),  # newer than any epoch the leader knows
        ("e", 0, E.fenced_leader_epoch, -1, -1),
    ]
    md = h.metadata(12, [{"name": "e", "topic_id": None}])
    assert md.topics[0].partitions[0].leader_epoch == 2


def test_metadata_reports_each_partitions_epoch_and_it_survives_a_restart(tmp_path):
    h = CoreHarness(tmp_path / "data")
    h.create_topic("e", 2)
    h.replicas.get_log("e", 1).leader_epoch = 5
    h.produce("e", 1, batch(b"a"))
    md = h.metadata(12, None)
    assert [(p.partition_index, p.leader_epoch) for p in md.topics[0].partitions] == [(0, 0), (1, 5)]
    h.close()
    again = CoreHarness(tmp_path / "data")
    try:
        md = again.metadata(12, None)
        assert [(p.partition_index, p.leader_epoch) for p in md.topics[0].partitions] == [(0, 0), (1, 5)]
        assert end_offsets(again, [("e", 1, 5, 5)]) == [("e", 1, E.none, 5, 1)]
    finally:
        again.close()


@pytest.mark.parametrize("version", [9, 12, 17])
def test_fetch_checks_current_leader_epoch(h, version):
    h.create_topic("e")
    h.produce("e", 0, batch(b"a"))
    h.replicas.get_log("e", 0).leader_epoch = 3
    ok = fetch_one(h, version, 0, current=3).responses[0].partitions[0]
    assert ok.error_code == E.none and ok.high_watermark == 1
    fenced = fetch_one(h, version, 0, current=2).responses[0].partitions[0]
    assert (fenced.error_code, fenced.high_watermark) == (E.fenced_leader_epoch, -1)
    unknown = fetch_one(h, version, 0, current=4).responses[0].partitions[0]
    assert unknown.error_code == E.unknown_leader_epoch
    assert fetch_one(h, version, 0).responses[0].partitions[0].error_code == E.none  # -1: no check


def test_fetch_v16_tells_a_fenced_consumer_the_current_leader(h):
    h.create_topic("e")
    h.replicas.get_log("e", 0).leader_epoch = 3
    resp = fetch_one(h, 16, 0, current=1)
    p = resp.responses[0].partitions[0]
    assert p.error_code == E.fenced_leader_epoch
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (1, 3)
    assert [(n.node_id, n.host, n.port) for n in resp.node_endpoints] == [(1, "127.0.0.1", 9092)]


def test_fetch_with_last_fetched_epoch_detects_divergence(h):
    h.create_topic("e")
    h.produce("e", 0, batch(b"a", b"b"))  # epoch 0: [0, 2)
    plog = h.replicas.get_log("e", 0)
    plog.leader_epoch = 1
    h.produce("e", 0, batch(b"c", b"d"))  # epoch 1: [2, 4)
    # consistent: the fetcher's epoch 0 ends at 2 here, at or after its offset 2
    ok = fetch_one(h, 12, 2, last_fetched=0).responses[0].partitions[0]
    assert ok.error_code == E.none and ok.records
    # it read epoch 0 up to 3, but epoch 0 ended at 2 here: its log diverged
    div = fetch_one(h, 12, 3, last_fetched=0).responses[0].partitions[0]
    assert div.error_code == E.none and not div.records
    assert (div.diverging_epoch.epoch, div.diverging_epoch.end_offset) == (0, 2)
    # the latest epoch ends at the log end offset: no divergence (the field's default)
    div = fetch_one(h, 12, 4, last_fetched=1).responses[0].partitions[0]
    assert (div.error_code, div.diverging_epoch.end_offset) == (E.none, -1)
    assert fetch_one(h, 12, 4, last_fetched=2).responses[0].partitions[0].error_code == (
        E.offset_out_of_range  # an epoch newer than the leader's: no end offset
    )


# -- ListOffsets -----------------------------------------------------------------------------


def test_list_offsets_answers_leader_epochs_from_v4(h):
    h.create_topic("e")
    h.produce("e", 0, build_batch([Record(b"a", timestamp=100), Record(b"b", timestamp=400)]))
    plog = h.replicas.get_log("e", 0)
    plog.leader_epoch = 2
    h.produce("e", 0, build_batch([Record(b"c", timestamp=300)]))
    for ts, offset, timestamp, epoch in (
        (-1, 3, -1, 2),  # latest: the current epoch
        (-2, 0, -1, 0),  # earliest: the epoch it starts
        (-3, 1, 400, 0),  # max timestamp: its batch's epoch
        (250, 1, 400, 0),
        (401, -1, -1, -1),  # none
    ):
        p = h.list_offsets("e", ts, version=7)
        assert (p.error_code, p.offset, p.timestamp, p.leader_epoch) == (E.none, offset, timestamp, epoch), ts
    assert h.list_offsets("e", -1, version=3).offset == 3  # no leader_epoch field below v4


@pytest.mark.parametrize(
    ("timestamp", "first_version"), [(-3, 7), (-4, 8), (-5, 9), (-6, 11)]
)
def test_list_offsets_special_timestamps_below_their_version_are_unsupported(h, timestamp, first_version):
    """KafkaApisTest.testListOffsetMaxTimestampWithUnsupportedVersion and its siblings
    (Kafka's timestampMinSupportedVersion)."""
    h.create_topic("e")
    h.produce("e", 0, batch(b"a"))
    p = h.list_offsets("e", timestamp, version=first_version - 1)
    assert (p.error_code, p.offset, p.timestamp) == (E.unsupported_version, -1, -1)
    p = h.list_offsets("e", timestamp, version=first_version)
    assert p.error_code == E.none


def test_list_offsets_tiered_timestamps_without_tiered_storage_and_unknown_timestamps(h):
    """LATEST_TIERED (-5, KIP-1005) and EARLIEST_PENDING_UPLOAD (-6, KIP-1023, v11): no
    offset without tiered storage, as UnifiedLog answers when remote storage is off."""
    h.create_topic("e")
    h.produce("e", 0, batch(b"a"))
    p = h.list_offsets("e", -5, version=9)
    assert (p.error_code, p.offset, p.leader_epoch) == (E.none, -1, -1)
    p = h.list_offsets("e", -6, version=11)
    assert (p.error_code, p.offset, p.timestamp, p.leader_epoch) == (E.none, -1, -1, -1)
    p = h.list_offsets("e", -7, version=11)  # no such special timestamp in Kafka 4.2
    assert p.error_code == E.unsupported_version


def test_list_offsets_checks_current_leader_epoch_and_duplicates(h):
    h.create_topic("e")
    body = list_offsets_body("e", 0, -1)
    body["topics"][0]["partitions"][0]["current_leader_epoch"] = 1
    p = h.request(LIST_OFFSETS, 7, body).topics[0].partitions[0]
    assert (p.error_code, p.offset) == (E.unknown_leader_epoch, -1)
    body = list_offsets_body("e", 0, -1)
    body["topics"][0]["partitions"] *= 2  # the same partition twice
    resp = h.request(LIST_OFFSETS, 7, body)
    assert [(p.partition_index, p.error_code) for p in resp.topics[0].partitions] == [
        (0, E.invalid_request)
    ]
