"""Coordinators, in Kafka's package shape: ``group`` holds the classic consumer group
protocol (GroupCoordinator, GroupMetadata, its delayed operations and the
``__consumer_offsets`` state)."""
