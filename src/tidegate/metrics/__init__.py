"""Metrics: Kafka's metric arithmetic and the broker's Prometheus exposition.

* :mod:`tidegate.metrics.stats`: Kafka's ``Sensor``/``Rate``/``Meter``/``SampledStat``
  arithmetic (org.apache.kafka.common.metrics), shared by the quota managers, the KIP-72
  memory pool and the producer. Plain objects: importing it loads nothing else.
* :mod:`tidegate.metrics.request_metrics`: the broker's hot-path counters (per-request
  timing, per-API and per-client histograms, per-topic counters); no Prometheus.
* :mod:`tidegate.metrics.collectors`: scrape-time collectors with Kafka's metric names,
  each reading a live component through a Protocol.
* :mod:`tidegate.metrics.prometheus`: one broker's registry (:class:`BrokerMetrics`).
* :mod:`tidegate.metrics.http_server`: the ``/metrics`` HTTP responder.
"""
