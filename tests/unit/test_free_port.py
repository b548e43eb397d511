"""`free_port`: ports for test servers and the embedded broker, clear of the kernel's own."""

from __future__ import annotations

import socket

import pytest

from runtime.kafka import broker
from runtime.kafka.broker import _ephemeral_start, free_port


def test_ports_handed_out_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(10_000 <= port < _ephemeral_start() for port in ports)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", ports[-1]))


def test_only_a_port_nobody_holds_is_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    base = free_port() + 1
    monkeypatch.setattr(broker, "_LOWEST_PORT", base)
    monkeypatch.setattr(broker, "_ephemeral_start", lambda: base + 8)
    monkeypatch.setattr(broker, "_HANDED_OUT", set())  # this worker's earlier ports
    held: list[socket.socket] = []
    try:
        for port in range(base, base + 8):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()  # someone else holds it: just as good
                continue
            held.append(sock)
        last = held.pop()
        free = last.getsockname()[1]
        last.close()
        assert free_port() == free
    finally:
        for sock in held:
            sock.close()
