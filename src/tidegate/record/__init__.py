"""Record formats: what the broker's log, the producer and the consumer all read and write.

Kafka's ``common/record`` and ``common/compress``, one layer below ``log``, ``protocol``,
``client`` and ``producer``, so none of them reaches sideways into another for the format:

* :mod:`.record_batch`: the v2 batch header (``DefaultRecordBatch``'s layout and
  constants, ``RecordBatch``): framing, CRC-32C, in-place offset assignment, and the
  errors a malformed batch raises.
* :mod:`.batch_builder`: encoding records and batches (``DefaultRecord.writeTo``,
  ``MemoryRecordsBuilder``).
* :mod:`.records`: decoding them back (``MemoryRecords`` batches, ``DefaultRecord``).
* :mod:`.control_records`: ``ControlRecordType`` and ``EndTransactionMarker``.
* :mod:`.compression`: the gzip, snappy, lz4 and zstd codecs as Kafka frames them.
* :mod:`.file_region`: a byte range of a segment file (a ``FileRecords`` slice), sent
  with ``sendfile``.

Varints are :mod:`tidegate.utils.byte_utils`. Validating what is appended to a log is
the log's (:mod:`tidegate.log.validator`, Kafka's ``LogValidator``).
"""
