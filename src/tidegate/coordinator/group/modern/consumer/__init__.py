"""KIP-848 consumer group members and their reconciliation (Kafka's
``coordinator.group.modern.consumer``)."""
