"""tidegate: a Kafka-wire-compatible broker built around resource safety."""

__version__ = "0.1.0"
