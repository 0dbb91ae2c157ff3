"""Producer ids for InitProducerId: Kafka's ProducerIdManager on one node.

Kafka's controller hands brokers blocks of 1000 producer ids and records each
block durably before any id of it is used, so an id is never given out twice,
even across restarts (ids of a block left unused at a crash are skipped, never
reused). Here the broker is its own controller: the first id of the next block
not yet reserved lives in ``producer-id-block`` in the data directory, replaced
atomically (tmp file, fsync, rename, fsync of the directory) before the first id
of a new block is handed out.
"""

from __future__ import annotations

from pathlib import Path

from tidegate.utils.files import write_atomically

PRODUCER_ID_BLOCK_FILE = "producer-id-block"
#: Kafka's ``ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE``.
BLOCK_SIZE = 1000
_MAX_PRODUCER_ID = 2**63 - 1


class ProducerIdBlockError(Exception):
    """The ``producer-id-block`` file is unreadable: refusing to guess (ids could repeat)."""


class ProducerIdManager:
    def __init__(self, data_dir: Path, block_size: int = BLOCK_SIZE) -> None:
        self.path = Path(data_dir) / PRODUCER_ID_BLOCK_FILE
        self.block_size = block_size
        self._next = self._read()
        #: Ids below this are reserved on disk for this process.
        self._block_end = self._next

    def _read(self) -> int:
        try:
            text = self.path.read_text(encoding="ascii")
        except FileNotFoundError:
            return 0
        except (OSError, UnicodeDecodeError) as exc:
            raise ProducerIdBlockError(f"cannot read {self.path}: {exc}") from exc
        values: dict[str, str] = {}
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                values[key.strip()] = value.strip()
        try:
            if values.get("version") != "0":
                raise ValueError(f"unknown version {values.get('version')!r}")
            start = int(values["next_block_start"])
            if start < 0:
                raise ValueError(f"negative next_block_start {start}")
        except (KeyError, ValueError) as exc:
            raise ProducerIdBlockError(f"{self.path} is damaged ({exc}): {text!r}") from exc
        return start

    @property
    def next_block_start(self) -> int:
        """The first id not reserved on disk (what the file says)."""
        return self._block_end

    def generate(self) -> int:
        """The next producer id. Raises ``OSError`` if a new block cannot be recorded
        (then no id is handed out)."""
        if self._next >= self._block_end:
            end = self._next + self.block_size
            if end > _MAX_PRODUCER_ID:
                raise OSError("producer ids exhausted")
            write_atomically(self.path, f"version: 0\nnext_block_start: {end}\n".encode("ascii"))
            self._block_end = end
        pid = self._next
        self._next = pid + 1
        return pid
