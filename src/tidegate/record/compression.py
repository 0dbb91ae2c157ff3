"""Record-batch compression codecs, framed the way Kafka's Java client frames them.

Kafka compresses the records section of a v2 batch (everything after the 61-byte
header) as one stream:

=========  ==  ===================================================================
codec      id  framing on the wire
=========  ==  ===================================================================
gzip        1  a gzip member (RFC 1952)
snappy      2  xerial ``SnappyOutputStream`` framing: magic ``\\x82SNAPPY\\x00``,
               version 1, compatible version 1, then blocks of [int32 length][raw
               snappy], each block compressing up to 32 KiB of input
lz4         3  an LZ4 frame as ``KafkaLZ4BlockOutputStream`` writes it: 64 KiB
               independent blocks, no block or content checksum, no content size
zstd        4  one zstd frame
=========  ==  ===================================================================

:class:`StreamCompressor` is what the producer writes records through: input is
compressed in blocks as it arrives and the compressed bytes are handed back as
soon as they exist, so a batch's buffer holds compressed data while the batch is
still open (as in Kafka, where the compressor stream writes into the batch
buffer). Flush points depend only on the number of input bytes, so the same
records always give the same bytes. :func:`decompress` reads all of the above
plus the variants other clients write (raw snappy, lz4 frames with checksums).

The same codecs serve the producer and the broker, which recompresses batches for a
topic whose ``compression.type`` names another codec (``tidegate.log.validator``).
Levels are Kafka's (KIP-390: ``compression.gzip.level``, ``compression.lz4.level``,
``compression.zstd.level``): gzip -1 is Deflater's default (6); lz4 9 is lz4's fast
compressor, any other level LZ4 HC at that level, as Kafka's ``Lz4BlockOutputStream``;
zstd's default is 3. Snappy has none.
"""

from __future__ import annotations

import struct

import cramjam

__all__ = [
    "CODECS",
    "GZIP",
    "LZ4",
    "NONE",
    "SNAPPY",
    "ZSTD",
    "StreamCompressor",
    "codec_id",
    "compress",
    "decompress",
]

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODECS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
#: Kafka's default level per codec (CompressionType.defaultLevel)
DEFAULT_LEVELS = {GZIP: -1, LZ4: 9, ZSTD: 3}
_GZIP_DEFAULT = 6  # Deflater.DEFAULT_COMPRESSION (-1) means level 6

#: Kafka's initial compression-ratio estimates are 1.0 for every codec; the producer
#: refines them per topic from the batches it closes (``CompressionRatioEstimator``).

_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_LZ4_MAGIC = 0x184D2204
_LZ4_BLOCK = 64 * 1024
#: gzip and zstd are streamed through cramjam; their output is collected every
#: this many input bytes (a sync flush), which bounds what sits in the compressor.
_STREAM_FLUSH = 64 * 1024


def codec_id(name: str | int) -> int:
    if isinstance(name, int):
        if name not in CODECS.values():
            raise ValueError(f"unknown compression codec id {name}")
        return name
    try:
        return CODECS[name.lower()]
    except KeyError:
        raise ValueError(
            f"compression.type must be one of {', '.join(CODECS)}, got {name!r}"
        ) from None


# -- xxhash32 (only for the 2-byte LZ4 frame descriptor checksum) -------------------

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _xxh32_short(data: bytes, seed: int = 0) -> int:
    """xxHash32 of fewer than 16 bytes (the frame descriptor is 2)."""
    assert len(data) < 16
    h = (seed + _P5 + len(data)) & _M32
    i = 0
    while i + 4 <= len(data):
        (k,) = struct.unpack_from("<I", data, i)
        h = (_rotl((h + k * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < len(data):
        h = (_rotl((h + data[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


# FLG: version 01, block independence; BD: 64 KiB maximum block size.
_LZ4_DESCRIPTOR = bytes([0x60, 0x40])
_LZ4_HEADER = (
    struct.pack("<I", _LZ4_MAGIC)
    + _LZ4_DESCRIPTOR
    + bytes([(_xxh32_short(_LZ4_DESCRIPTOR) >> 8) & 0xFF])
)


def _lz4_block(data: bytes, level: int = DEFAULT_LEVELS[LZ4]) -> bytes:
    if level == DEFAULT_LEVELS[LZ4]:  # Kafka: the fast compressor at the default level
        compressed = bytes(cramjam.lz4.compress_block(data, store_size=False))
    else:
        compressed = bytes(cramjam.lz4.compress_block(
            data, mode="high_compression", compression=level, store_size=False
        ))
    if len(compressed) >= len(data):  # incompressible: stored raw, high bit set
        return struct.pack("<I", len(data) | 0x80000000) + bytes(data)
    return struct.pack("<I", len(compressed)) + compressed


def _xerial_block(data: bytes) -> bytes:
    compressed = bytes(cramjam.snappy.compress_raw(bytes(data)))
    return struct.pack(">i", len(compressed)) + compressed


class StreamCompressor:
    """Compress a stream of record bytes, returning output as it becomes available.

    ``write(data)`` returns the compressed bytes produced so far (often ``b""``);
    ``finish()`` returns the rest, ending the stream. Concatenated, the outputs are
    one stream in the codec's Kafka framing.
    """

    __slots__ = ("_inner", "_pending", "_started", "codec", "level", "uncompressed")

    def __init__(self, codec: int, level: int | None = None) -> None:
        """``level``: Kafka's level for gzip, lz4 and zstd (None: the codec's default)."""
        if codec not in (GZIP, SNAPPY, LZ4, ZSTD):
            raise ValueError(f"no stream compressor for codec {codec}")
        self.codec = codec
        self.level = DEFAULT_LEVELS.get(codec, 0) if level is None else level
        self._pending = bytearray()
        self._started = False
        self.uncompressed = 0
        # the streaming codecs (gzip, zstd); snappy and lz4 are framed here by block
        self._inner: cramjam.gzip.Compressor | cramjam.zstd.Compressor | None
        if codec == GZIP:
            self._inner = cramjam.gzip.Compressor(_GZIP_DEFAULT if self.level == -1 else self.level)
        elif codec == ZSTD:
            self._inner = cramjam.zstd.Compressor(self.level)
        else:
            self._inner = None

    def _block_size(self) -> int:
        return {SNAPPY: _XERIAL_BLOCK, LZ4: _LZ4_BLOCK}.get(self.codec, _STREAM_FLUSH)

    def _emit(self, block: bytes) -> bytes:
        inner = self._inner
        if inner is not None:  # gzip, zstd
            inner.compress(block)
            return bytes(inner.flush())
        if self.codec == SNAPPY:
            out = _xerial_block(block)
            if not self._started:
                self._started = True
                return _XERIAL_HEADER + out
            return out
        out = _lz4_block(block, self.level)  # LZ4
        if not self._started:
            self._started = True
            return _LZ4_HEADER + out
        return out

    def write(self, data: bytes) -> bytes:
        self.uncompressed += len(data)
        pending = self._pending
        pending += data
        size = self._block_size()
        if len(pending) < size:
            return b""
        outs = []
        while len(pending) >= size:
            outs.append(self._emit(bytes(pending[:size])))
            del pending[:size]
        return b"".join(outs)

    def finish(self) -> bytes:
        pending = bytes(self._pending)
        self._pending = bytearray()
        inner = self._inner
        if inner is not None:  # gzip, zstd
            if pending:
                inner.compress(pending)
            return bytes(inner.finish())
        if self.codec == SNAPPY:
            out = _xerial_block(pending) if pending else b""
            if not self._started:
                self._started = True
                out = _XERIAL_HEADER + out
            return out
        out = _lz4_block(pending, self.level) if pending else b""  # LZ4
        if not self._started:
            self._started = True
            out = _LZ4_HEADER + out
        return out + b"\x00\x00\x00\x00"  # end mark


def compress(codec: int | str, data: bytes, level: int | None = None) -> bytes:
    """One-shot compression in Kafka's framing (the same bytes a StreamCompressor gives)."""
    codec = codec_id(codec)
    if codec == NONE:
        return bytes(data)
    c = StreamCompressor(codec, level)
    return c.write(data) + c.finish()


def _xerial_decode(data: bytes) -> bytes:
    out = []
    pos = 16
    n = len(data)
    while pos < n:
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + size])))
        pos += size
    return b"".join(out)


def decompress(codec: int | str, data: bytes) -> bytes:
    """Decompress a records section written by any Kafka client."""
    codec = codec_id(codec)
    data = bytes(data)
    if codec == NONE:
        return data
    if codec == GZIP:
        return bytes(cramjam.gzip.decompress(data))
    if codec == SNAPPY:
        if data[:8] == _XERIAL_HEADER[:8]:
            return _xerial_decode(data)
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == LZ4:
        return bytes(cramjam.lz4.decompress(data))
    return bytes(cramjam.zstd.decompress(data))
