"""The fault proxy: a typed Toxiproxy API v2 client, the embedded Toxiproxy-compatible server,
connection events (an extension) and the choice between a real and the embedded server.

Start here: :func:`harness.toxiproxy.server_choice.start_fault_proxy`.
"""

from harness.toxiproxy.client import (
    DEFAULT_URL,
    ToxiproxyAPIError,
    ToxiproxyClient,
    ToxiproxyUnreachableError,
)
from harness.toxiproxy.models import ConnEvent, Proxy, Toxic
from harness.toxiproxy.server import EmbeddedToxiproxy, ToxiproxyServer
from harness.toxiproxy.server_choice import FaultProxyHandle, forward_to_history, start_fault_proxy

__all__ = [
    "DEFAULT_URL",
    "ConnEvent",
    "EmbeddedToxiproxy",
    "FaultProxyHandle",
    "Proxy",
    "Toxic",
    "ToxiproxyAPIError",
    "ToxiproxyClient",
    "ToxiproxyServer",
    "ToxiproxyUnreachableError",
    "forward_to_history",
    "start_fault_proxy",
]
