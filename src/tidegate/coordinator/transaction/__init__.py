"""The transaction coordinator (Kafka's ``coordinator/transaction``), transaction version 1.

* :mod:`.transaction_metadata`: TransactionState and TransactionMetadata, the state
  machine of one transactional id (prepare a transition, write it, complete it);
* :mod:`.transaction_log`: the ``__transaction_state`` key and value formats;
* :mod:`.transaction_state_manager`: the cache of ids, loading it, writing transitions;
* :mod:`.transaction_marker_channel_manager`: COMMIT/ABORT markers to the partitions;
* :mod:`.transaction_coordinator`: the request handling, timeouts and expiry.
"""
