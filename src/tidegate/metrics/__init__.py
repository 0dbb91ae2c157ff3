"""Metrics: Kafka's metric arithmetic and the broker's Prometheus exposition.

* :mod:`tidegate.metrics.stats`: Kafka's ``Sensor``/``Rate``/``Meter``/``SampledStat``
  arithmetic (org.apache.kafka.common.metrics), shared by the quota managers, the KIP-72
  memory pool and the producer. Plain objects: importing it loads nothing else.
* :mod:`tidegate.metrics.prometheus`: the broker's registry, collectors with Kafka's
  metric names, per-request timing and the ``/metrics`` HTTP responder.
"""
