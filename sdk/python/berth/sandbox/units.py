"""Resource and network options of containers started from outside (sandboxes, pods).

CPU as cores or Kubernetes-style millicores ("500m"), memory as MiB or with a
unit (options.parse_memory), GPU types with the count rule (options.parse_gpu),
exposed ports, and the outbound policy (spec, Errors §5: ``block_network``
with an ``allow_list``, an ``allow_list`` over 10 entries or a non-CIDR entry
are refused here, before any request, with ValueError).
"""

import ipaddress
from typing import Any, List, Optional, Sequence, Tuple

from ..api.options import cpu_fields, parse_gpu, parse_memory

__all__ = [
    "MAX_ALLOW_LIST_ENTRIES",
    "check_egress",
    "check_ports",
    "check_ttl",
    "parse_cpu",
    "parse_gpu",
    "parse_memory",
]

MAX_ALLOW_LIST_ENTRIES = 10
MAX_PORTS = 32  # the stub schema's bound (coordinator/http/routes/gateway-stubs.ts)
# Cores or millicores, as @function takes them (one parser for every kind).
parse_cpu = cpu_fields


def check_ports(ports: Optional[Sequence[Any]]) -> List[int]:
    """Container ports 1..65535, each once, in the order given."""
    if ports is None:
        return []
    if isinstance(ports, (str, bytes)) or not isinstance(ports, (list, tuple)):
        raise ValueError(f"ports must be a list of port numbers, not {ports!r}")
    out: List[int] = []
    for p in ports:
        out.append(check_port(p))
    out = list(dict.fromkeys(out))
    if len(out) > MAX_PORTS:
        raise ValueError(f"ports lists {len(out)} ports; at most {MAX_PORTS} can be exposed")
    return out


def check_port(port: Any) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port {port!r} is not a port number (an int from 1 to 65535)")
    return port


def check_egress(block_network: Any, allow_list: Optional[Sequence[Any]]) -> Tuple[bool, Optional[List[str]]]:
    """``(block_network, allow_list)`` as sent: the entries checked as IPv4/IPv6 CIDRs, kept as written.

    ``allow_list=[]`` (or None) with ``block_network=False`` leaves outbound traffic open.
    """
    if not isinstance(block_network, bool):
        raise ValueError(f"block_network must be True or False, not {block_network!r}")
    if allow_list is None:
        return block_network, None
    if isinstance(allow_list, (str, bytes)) or not isinstance(allow_list, (list, tuple)):
        raise ValueError(f"allow_list must be a list of CIDR strings such as ['10.0.0.0/8'], not {allow_list!r}")
    entries = list(allow_list)
    if block_network and entries:
        raise ValueError("block_network=True cannot be combined with an allow_list: use one or the other")
    if len(entries) > MAX_ALLOW_LIST_ENTRIES:
        raise ValueError(
            f"allow_list has {len(entries)} entries; at most {MAX_ALLOW_LIST_ENTRIES} CIDR entries are allowed"
        )
    for entry in entries:
        check_cidr(entry)
    return block_network, [e.strip() for e in entries]


def check_cidr(entry: Any) -> None:
    """An ``address/prefix`` (IPv4 or IPv6); host bits may be set, as the coordinator clears them."""
    if not isinstance(entry, str):
        raise ValueError(f"allow_list entry {entry!r} is not a string in CIDR notation such as '10.0.0.0/8'")
    text = entry.strip()
    addr, slash, prefix = text.partition("/")
    if not slash or "%" in addr or not prefix.isdigit() or len(prefix) > 3:
        raise ValueError(
            f"allow_list entry {entry!r} is not in CIDR notation: expected address/prefix, e.g. 10.0.0.0/8"
        )
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError as e:
        raise ValueError(f"allow_list entry {entry!r} is not in CIDR notation: {e}") from None


def check_ttl(ttl: Any) -> int:
    """Idle seconds before a sandbox ends: -1 (never) or at least 1."""
    if isinstance(ttl, bool) or not isinstance(ttl, int) or (ttl < 1 and ttl != -1):
        raise ValueError(f"ttl must be a whole number of seconds >= 1, or -1 to never time out; got {ttl!r}")
    return ttl
