"""The lowest package (Kafka's ``common/utils``): byte encodings (:mod:`.byte_utils`),
atomic file replacement (:mod:`.files`) and topic names (:mod:`.topic`) that every other
package may use; it imports nothing else of tidegate.

It also holds :data:`INT32_MAX`, Java's ``Integer.MAX_VALUE``: the largest int32 of the
wire (sequence numbers and epochs wrap after it, "no limit" defaults are it, a segment's
offsets span less than it)."""

#: Java's ``Integer.MAX_VALUE``, 2**31 - 1.
INT32_MAX = 2**31 - 1
