"""The broker's advertised endpoints: what Metadata, DescribeCluster and
FindCoordinator tell a client to connect to.

A client is answered with the advertised endpoint of the listener its request came in
on (Kafka's per-listener metadata). A listener configured with port 0 advertises the
port actually bound, which the shell records in :attr:`Endpoints.bound_ports` once it
listens.
"""

from __future__ import annotations

from tidegate.config import BrokerConfig
from tidegate.network.request_channel import RequestContext


class Endpoints:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        #: listener name -> port actually bound (for listeners configured with port 0)
        self.bound_ports: dict[str, int] = {}

    def endpoint(self, ctx: RequestContext | None) -> tuple[str, int]:
        """(host, port) of the advertised listener the request came in on."""
        listeners = self.config.advertised_listeners
        chosen = listeners[0]
        for lst in listeners:
            if ctx is not None and lst.name == ctx.listener_name:
                chosen = lst
                break
        port = chosen.port or self.bound_ports.get(chosen.name, 0)
        return chosen.host, port

    def listeners(self) -> list[tuple[str, str, int]]:
        """(name, host, port) of every advertised listener (the ports actually bound)."""
        return [
            (lst.name, lst.host, lst.port or self.bound_ports.get(lst.name, 0))
            for lst in self.config.advertised_listeners
        ]
