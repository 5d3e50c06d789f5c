"""Node addresses: where the other nodes of a gang reach a node (docs/agent.md §Multi-node gangs).

An agent registers one; a platform admin may set it instead (then the agent's no longer replaces it). A gang's
rendezvous is its rank-0 node's address, handed to every part in the bind, so a bad value would only show as
a job that never meets: it is checked here, once, for every door (register, the admin API, the console,
`manage.py node address`). Plain Python: the serializers, services and commands all call it.
"""

from __future__ import annotations

import ipaddress
import re

ADDRESS_MAX = 253  # a DNS name's limit; any IP literal is shorter
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
ADDRESS_RULE = (
    "an IPv4 or IPv6 address or a host name (letters, digits, hyphens and dots, at most 253 characters)"
)


def check_node_address(value: object) -> str:
    """The address in its one spelling (an IP as Python writes it, a host name in lower case), or ValueError
    with the reason. Blank is allowed (no address: a gang spanning the node cannot meet, see rendezvous)."""
    if not isinstance(value, str):
        raise ValueError(f"must be {ADDRESS_RULE}")
    text = value.strip()
    if not text:
        return ""
    if len(text) > ADDRESS_MAX:
        raise ValueError(f"at most {ADDRESS_MAX} characters")
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        pass
    else:
        if ip.is_unspecified or ip.is_multicast:
            raise ValueError(f"{text} is not an address other nodes can reach")
        return str(ip)
    host = text.lower().removesuffix(".")
    labels = host.split(".")
    # A name of digits and dots only is a malformed IPv4 address (256.1.1.1), not a host name.
    if not all(_LABEL.match(label) for label in labels) or labels[-1].isdigit():
        raise ValueError(f"{text!r} is not {ADDRESS_RULE}")
    return host
