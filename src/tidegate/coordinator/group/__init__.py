"""The classic consumer group coordinator (Kafka's ``kafka.coordinator.group``)."""
