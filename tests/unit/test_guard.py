"""The destination guard's rules, on addresses as the socket sees them."""

from __future__ import annotations

import socket

import pytest

from actors.delivery.egress.guard import MULTI_TENANT_DENY, DestinationDenied, DestinationGuard


@pytest.mark.parametrize("address", [
    "169.254.169.254", "fd00:ec2::254", "fe80::1%eth0", "100.100.100.200", "0.0.0.0",
    "::ffff:169.254.169.254",  # an IPv4-mapped spelling of the metadata address
])
def test_metadata_and_link_local_addresses_are_denied_by_default(address: str) -> None:
    assert DestinationGuard().refusal(address) is not None


@pytest.mark.parametrize("address", ["127.0.0.1", "10.1.2.3", "192.168.0.7", "::1", "8.8.8.8"])
def test_loopback_private_and_public_addresses_are_allowed_by_default(address: str) -> None:
    assert DestinationGuard().refusal(address) is None


def test_the_multi_tenant_profile_denies_loopback_and_private_ranges() -> None:
    guard = DestinationGuard(deny=MULTI_TENANT_DENY)
    for address in ("127.0.0.1", "::ffff:127.0.0.1", "10.0.0.1", "172.20.0.1", "fc00::1",
                    "64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1",  # NAT64 of metadata, loopback
                    "64:ff9b:1::a00:1", "::10.0.0.1"):
        assert guard.refusal(address) is not None, address
    assert guard.refusal("93.184.216.34") is None


def test_an_allow_list_admits_only_its_networks_and_deny_still_wins() -> None:
    guard = DestinationGuard(allow=["10.0.0.0/8"], deny=["10.9.0.0/16"])
    assert guard.refusal("10.1.0.1") is None
    assert "outside allow_networks" in (guard.refusal("192.168.1.1") or "")
    assert "denied network 10.9.0.0/16" in (guard.refusal("10.9.0.5") or "")


def test_a_bad_network_names_the_entry() -> None:
    with pytest.raises(ValueError, match=r"'10\.0\.0\.0/33'"):
        DestinationGuard(deny=["10.0.0.0/33"])


def test_the_socket_factory_refuses_before_a_socket_exists() -> None:
    guard = DestinationGuard(deny=["127.0.0.0/8"])
    info = (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80))
    with pytest.raises(DestinationDenied, match=r"127\.0\.0\.1"):
        guard.socket_factory(info)
    allowed = DestinationGuard().socket_factory(info)
    allowed.close()
