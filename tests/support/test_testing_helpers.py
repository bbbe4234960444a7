"""The support package's testing helpers pick ports an engine can really use."""

import socket

from chariot_support.dev.testing import free_ports


def test_free_ports_are_different_and_bindable():
    for _ in range(50):
        ports = free_ports(3)
        assert len(set(ports)) == 3, ports  # a gRPC server would share a repeated port with the REST server
        for port in ports:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port))
