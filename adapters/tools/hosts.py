"""Which hosts a request may make this server, or its engine, reach (`--mcp-hosts`): the
MCP servers of its `mcp` tools, and the images it names by URL (adapters/tools/images.py).

A request names its MCP servers by URL, and the server connects to them from inside the
operator's network: without a rule, any API key could have it reach what only it can
reach (a cloud's metadata address, a database's admin port, a service on the loopback).
By default (`public`) a server's host must resolve to public addresses only; an operator
whose MCP servers are inside names them (`mcp.internal`, `.corp.example`) or their
networks (`10.0.0.0/8`); `any` turns the rule off.

The rule is kept where the connection is made (`GuardedBackend`): the host is resolved
once, every address it resolves to must be allowed, and the connection goes to the
address that was checked, so a name that resolves elsewhere a moment later (DNS
rebinding) reaches nothing new. A redirect is a new connection, checked the same way.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import anyio
import httpcore2

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
# `anyio.getaddrinfo`'s shape: a host's addresses (the socket address is each one's [4]).
Resolve = Callable[..., Awaitable[list[tuple[Any, ...]]]]

PUBLIC = "public"
ANY = "any"


class HostPolicy:
    """The parsed `--mcp-hosts`: `public`, `any`, networks and host names."""

    def __init__(
        self,
        *,
        public: bool = False,
        anything: bool = False,
        networks: Iterable[Network] = (),
        names: Iterable[str] = (),
        suffixes: Iterable[str] = (),
    ) -> None:
        self.public = public
        self.anything = anything
        self.networks = tuple(networks)
        self.names = frozenset(names)
        self.suffixes = tuple(suffixes)

    @classmethod
    def parse(cls, text: str) -> HostPolicy:
        """Comma-separated entries: `public`, `any`, a network (`10.0.0.0/8`, an address
        alone is its own network), a host name (`mcp.internal`), or every host under a
        domain (`.corp.example` or `*.corp.example`). ValueError names an entry that is
        none of them; nothing at all is a ValueError too."""
        entries = [e.strip().lower() for e in text.split(",") if e.strip()]
        if not entries:
            raise ValueError("no entry: give `public`, `any`, networks or host names")
        public = anything = False
        networks: list[Network] = []
        names: list[str] = []
        suffixes: list[str] = []
        for entry in entries:
            if entry == PUBLIC:
                public = True
            elif entry == ANY:
                anything = True
            elif entry.startswith(("*.", ".")):
                suffix = "." + entry.lstrip("*.")
                if not _hostname(suffix[1:]):
                    raise ValueError(f"{entry!r} is not a domain")
                suffixes.append(suffix)
            elif (network := _network(entry)) is not None:
                networks.append(network)
            elif _hostname(entry):
                names.append(entry)
            else:
                raise ValueError(f"{entry!r} is not `public`, `any`, a network or a host name")
        return cls(
            public=public, anything=anything, networks=networks, names=names, suffixes=suffixes
        )

    def named(self, host: str) -> bool:
        """Whether the operator named this host (or a domain it is under): it may be
        reached whatever it resolves to."""
        host = host.lower().rstrip(".")
        return host in self.names or any(("." + host).endswith(s) for s in self.suffixes)

    def refuses(self, host: str, addresses: Iterable[str]) -> bool:
        """Whether `host`, resolved to `addresses`, is out of reach: not named, and one of
        its addresses not allowed (a name that resolves to a public address and a private
        one would reach the private one as soon as it is the one tried)."""
        if self.anything or self.named(host):
            return False
        return not all(self.allows(ipaddress.ip_address(a.split("%")[0])) for a in addresses)

    def allows(self, address: Address) -> bool:
        """Whether an address the host resolved to may be reached."""
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # `::ffff:127.0.0.1` is the loopback
        if self.public and public(address):
            return True
        return any(address in n for n in self.networks)


# IPv6 prefixes that carry an IPv4 address in their last 32 bits: the well-known NAT64
# prefix (RFC 6052), whose gateway connects to that IPv4 address, and the IPv4-compatible
# addresses (`::a.b.c.d`, RFC 4291, deprecated), which a host may still route as IPv4.
_EMBEDDING = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("::/96"))
# Local-use NAT64 (RFC 8215): an operator's own translator, whose IPv4 side is its network.
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")


def public(address: Address) -> bool:
    """Whether an address is public: Python's `is_global`, except where it says yes to an
    IPv6 form of an address that is not. A NAT64, IPv4-compatible or 6to4 (`2002::/16`)
    address reaches the IPv4 address inside it, so it is public only when that one is;
    site-local (`fec0::/10`, deprecated but routed by some networks), local-use NAT64 and
    multicast are never public."""
    if address.is_multicast:
        return False
    if isinstance(address, ipaddress.IPv4Address):
        return address.is_global
    if address.is_site_local or address in _LOCAL_NAT64:
        return False
    if address.sixtofour is not None:
        return public(address.sixtofour)
    if any(address in n for n in _EMBEDDING):
        return public(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return address.is_global


def _network(text: str) -> Network | None:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def _hostname(text: str) -> bool:
    labels = text.split(".")
    return all(
        0 < len(label) <= 63 and label.replace("-", "").isalnum() and label.isascii()
        for label in labels
    )


async def resolved(host: str, port: int, resolve: Resolve = anyio.getaddrinfo) -> list[str]:
    """Every address `host` resolves to (an address resolves to itself); none, or a name
    that does not resolve, is a ConnectError."""
    try:
        found = await resolve(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise httpcore2.ConnectError(f"{host}: {exc}") from exc
    addresses = [str(info[4][0]) for info in found]
    if not addresses:
        raise httpcore2.ConnectError(f"{host}: no address")
    return addresses


class HostRefused(httpcore2.ConnectError):
    """A host the policy does not let the server reach. Its words name the host as the
    request gave it and the setting, never the addresses it resolved to (those would map
    the operator's network for a client that may not see it)."""


class GuardedBackend(httpcore2.AsyncNetworkBackend):
    """httpcore's network backend that connects only to addresses `policy` allows."""

    def __init__(
        self,
        policy: HostPolicy,
        inner: httpcore2.AsyncNetworkBackend | None = None,
        resolve: Resolve = anyio.getaddrinfo,
        *,
        what: str = "the MCP server",
        setting: str = "--mcp-hosts",
    ) -> None:
        self._policy = policy
        self._inner = inner or httpcore2.AnyIOBackend()
        self._resolve = resolve
        self._what = what  # what is refused, and the setting that says where it may be
        self._setting = setting

    # httpcore's interface, `timeout` included: the caller bounds the whole call.
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        address = await self._checked(host, port)
        return await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)

    async def _checked(self, host: str, port: int) -> str:
        """The address to connect to: the first that `host` resolves to, once every one of
        them is allowed (or the host is named)."""
        addresses = await resolved(host, port, self._resolve)
        if self._policy.refuses(host, addresses):
            raise HostRefused(
                f"{self._what}'s host {host} is not one this server may reach "
                f"(its operator's {self._setting})"
            )
        return addresses[0]

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise HostRefused(f"{self._what} on a Unix socket is not one this server may reach")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)
