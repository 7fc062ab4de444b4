"""`--mcp-hosts`: the rule of which hosts a request's MCP servers may be on
(adapters/tools/hosts.py), and the network backend that keeps it, on real sockets."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator

import pytest

from adapters.tools.hosts import GuardedBackend, HostPolicy, HostRefused


@pytest.mark.parametrize(
    ("text", "address", "allowed"),
    [
        ("public", "93.184.215.14", True),
        ("public", "2606:4700::6810:84e5", True),
        ("public", "127.0.0.1", False),  # the loopback
        ("public", "::1", False),
        ("public", "::ffff:127.0.0.1", False),  # the loopback, mapped into IPv6
        ("public", "169.254.169.254", False),  # a cloud's metadata address
        ("public", "10.1.2.3", False),
        ("public", "172.16.0.9", False),
        ("public", "192.168.1.1", False),
        ("public", "100.64.0.1", False),  # shared address space (carrier NAT)
        ("public", "fd00::1", False),  # unique local
        ("public", "0.0.0.0", False),
        ("10.0.0.0/8", "10.1.2.3", True),
        ("10.0.0.0/8", "93.184.215.14", False),  # networks alone: no public address
        ("public,10.0.0.0/8", "93.184.215.14", True),
        ("127.0.0.1", "127.0.0.1", True),  # an address alone is its own network
        ("127.0.0.1", "127.0.0.2", False),
        ("fd00::/8", "fd00::1", True),
    ],
)
def test_an_address_is_reached_only_if_the_rule_allows_it(
    text: str, address: str, allowed: bool
) -> None:
    assert HostPolicy.parse(text).allows(ipaddress.ip_address(address)) is allowed


def test_hosts_named_and_domains_are_reached_whatever_they_resolve_to() -> None:
    policy = HostPolicy.parse("MCP.internal, .corp.example, *.lab.example")
    assert policy.named("mcp.internal") and policy.named("mcp.internal.")
    assert policy.named("tools.corp.example") and policy.named("a.b.lab.example")
    assert policy.named("corp.example")  # the domain itself
    assert not policy.named("evilcorp.example") and not policy.named("internal")
    assert not policy.named("mcp.internal.evil.example")


def test_the_setting_is_parsed_whole_or_refused() -> None:
    assert HostPolicy.parse("any").anything
    assert not HostPolicy.parse("public").anything
    for bad in ("", " , ", "10.0.0.0/33", "exa mple.com", "*.", "http://x", "ümlaut.example"):
        with pytest.raises(ValueError, match=r"."):
            HostPolicy.parse(bad)


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port on the loopback that accepts connections."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


async def _connect(policy: str, host: str, port: int) -> str:
    stream = await GuardedBackend(HostPolicy.parse(policy)).connect_tcp(host, port, timeout=5)
    peer = stream.get_extra_info("server_addr")
    await stream.aclose()
    return str(peer[0])


async def test_the_backend_connects_to_the_address_it_checked(listener: int) -> None:
    assert await _connect("127.0.0.0/8", "127.0.0.1", listener) == "127.0.0.1"
    assert await _connect("localhost", "localhost", listener) in ("127.0.0.1", "::1")


@pytest.mark.parametrize(("policy", "host"), [("public", "127.0.0.1"), ("public", "localhost")])
async def test_the_backend_refuses_a_host_the_rule_does_not_allow_in_words_that_map_nothing(
    listener: int, policy: str, host: str
) -> None:
    with pytest.raises(HostRefused) as refused:
        await _connect(policy, host, listener)
    words = str(refused.value)
    assert host in words and "--mcp-hosts" in words
    if host == "localhost":
        assert "127.0.0.1" not in words  # what the name resolved to is not told


async def test_every_address_a_name_resolves_to_must_be_allowed(listener: int) -> None:
    # A name that resolves to an allowed address and a refused one is refused: the
    # connection could go to either. (This box's DNS is not the test's to set, so the
    # name's answer is given: the loopback, and a cloud's metadata address.)
    async def resolve(host: str, port: int, **_: object) -> list[tuple[object, ...]]:
        assert host == "twofaced.example"
        return [(0, 0, 0, "", ("127.0.0.1", port)), (0, 0, 0, "", ("169.254.169.254", port))]

    def backend(policy: str) -> GuardedBackend:
        return GuardedBackend(HostPolicy.parse(policy), resolve=resolve)

    with pytest.raises(HostRefused):
        await backend("127.0.0.0/8").connect_tcp("twofaced.example", listener)
    both = await backend("127.0.0.0/8,169.254.0.0/16").connect_tcp("twofaced.example", listener)
    assert both.get_extra_info("server_addr")[0] == "127.0.0.1"  # the first, checked
    await both.aclose()
    named = await backend("twofaced.example").connect_tcp("twofaced.example", listener)
    await named.aclose()


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("64:ff9b::a00:1", False),  # NAT64 of 10.0.0.1
        ("64:ff9b::a9fe:a9fe", False),  # NAT64 of the metadata address
        ("64:ff9b::7f00:1", False),  # NAT64 of the loopback
        ("64:ff9b::808:808", True),  # NAT64 of a public address
        ("64:ff9b:1::a00:1", False),  # local-use NAT64: the operator's own translator
        ("::7f00:1", False),  # IPv4-compatible loopback
        ("::a9fe:a9fe", False),  # IPv4-compatible metadata address
        ("::808:808", True),  # IPv4-compatible public address
        ("2002:a9fe:a9fe::", False),  # 6to4 of the metadata address
        ("2002:a00:1::1", False),  # 6to4 of 10.0.0.1
        ("2002:808:808::1", True),  # 6to4 of a public address
        ("fec0::1", False),  # site-local
        ("ff0e::1", False),  # multicast
        ("224.0.0.1", False),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", False),  # Teredo
        ("2606:4700::1111", True),
    ],
)
def test_an_ipv6_form_of_an_address_is_public_only_if_the_address_inside_is(
    address: str, allowed: bool
) -> None:
    assert HostPolicy.parse("public").allows(ipaddress.ip_address(address)) is allowed


async def test_the_backend_refuses_a_name_resolving_to_an_ipv6_form_of_a_private_address(
    listener: int,
) -> None:
    async def resolve(host: str, port: int, **_: object) -> list[tuple[object, ...]]:
        return [(0, 0, 0, "", ("64:ff9b::a9fe:a9fe", port, 0, 0))]

    with pytest.raises(HostRefused):
        await GuardedBackend(HostPolicy.parse("public"), resolve=resolve).connect_tcp(
            "nat64.example", listener
        )
