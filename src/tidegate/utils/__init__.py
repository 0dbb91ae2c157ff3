"""The lowest package (Kafka's ``common/utils``): byte encodings and file helpers that every
other package may use; it imports nothing else of tidegate."""
