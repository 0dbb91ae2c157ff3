"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-219, KIP-546), shaped like Kafka's.

* :mod:`.client_quota_manager`: ClientQuotaManager (the Produce and Fetch byte rates),
  QuotaType, QuotaEntity and entity resolution, the throttle arithmetic, and
  ThrottledChannel (a timer task that ends a connection's throttle);
* :mod:`.client_request_quota_manager`: ClientRequestQuotaManager (the Request quota);
* :mod:`.quota_factory`: QuotaManagers, the broker's three managers with their KIP-546
  configuration (AlterClientQuotas/DescribeClientQuotas, persisted).

All sans-IO: the managers take an injected clock; the broker's scheduler drives their
throttle timers and KafkaApis decides the throttles.
"""
