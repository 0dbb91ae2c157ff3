"""The lowest package (Kafka's ``common/utils``): byte encodings (:mod:`.byte_utils`),
atomic file replacement (:mod:`.files`) and topic names (:mod:`.topic`) that every other
package may use; it imports nothing else of tidegate."""
