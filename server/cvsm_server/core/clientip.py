"""The client IP address: the one address that allowlists, rate limits and the audit log use.

It is the socket peer (an IPv4-mapped IPv6 peer counts as its IPv4 address). `X-Forwarded-For`
is read only when the peer is a configured trusted proxy, and then the right-most address that is
not itself a trusted proxy is the client.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Sequence

from .config import IPNetwork

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def normalize(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def parse_address(text: str) -> IPAddress | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # "[::1]:443"
        text = text[1:text.index("]")]
    elif text.count(":") == 1:  # "1.2.3.4:80"
        text = text.split(":", 1)[0]
    text = text.split("%", 1)[0]  # zone id
    try:
        return normalize(ipaddress.ip_address(text))
    except ValueError:
        return None


def _trusted(address: IPAddress, proxies: Sequence[IPNetwork]) -> bool:
    return any(address.version == net.version and address in net for net in proxies)


def client_ip(peer_text: str | None, forwarded_for: Sequence[str],
              trusted_proxies: Sequence[IPNetwork]) -> str:
    """The client address, from the socket peer and the `X-Forwarded-For` header values."""
    peer = parse_address(peer_text) if peer_text else None
    if peer is None:
        return "unknown"
    if not trusted_proxies or not _trusted(peer, trusted_proxies):
        return str(peer)
    hops = []
    for header in forwarded_for:
        hops.extend(h for h in header.split(",") if h.strip())
    for hop in reversed(hops):
        address = parse_address(hop)
        if address is None:
            # An unparsable hop was written by someone we do not trust: stop at the last good one.
            break
        if not _trusted(address, trusted_proxies):
            return str(address)
        peer = address
    return str(peer)


@functools.lru_cache(maxsize=4096)
def cached_client_ip(peer_text: str | None, forwarded_for: tuple[str, ...],
                     trusted_proxies: tuple[IPNetwork, ...]) -> str:
    """`client_ip`, remembered: a client sends the same peer and header on every request."""
    return client_ip(peer_text, forwarded_for, trusted_proxies)


def address_allowed(address_text: str, allowed: Sequence[str]) -> bool:
    """True when the client address is inside one of the allowlist's CIDRs or single addresses."""
    address = parse_address(address_text)
    if address is None:
        return False
    for entry in allowed:
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            continue
        if network.version == 6 and network.prefixlen >= 96:
            mapped = network.network_address.ipv4_mapped
            if mapped is not None:
                network = ipaddress.ip_network(f"{mapped}/{network.prefixlen - 96}")
        if address.version == network.version and address in network:
            return True
    return False


def validate_allowlist(entries: Sequence[str]) -> list[str]:
    """Canonical CIDR strings for an allowlist; raises ValueError naming a bad entry."""
    out = []
    for entry in entries:
        try:
            network = ipaddress.ip_network(entry.strip(), strict=False)
        except ValueError:
            raise ValueError(entry) from None
        out.append(str(network))
    return out
