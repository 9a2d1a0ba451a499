"""Ports and addresses: in range, free, loopback or not, where to reach a bound host."""

from __future__ import annotations

import argparse
import ipaddress
import socket

from napari_sam3.core.errors import RefusedError


class PortError(RefusedError, ValueError):
    """A port out of range, or already in use."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_port(host: str, port: object, what: str) -> int:
    """`port` as an int when it is in range and free on `host`; PortError otherwise."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise PortError(f"{what} port {port!r} is out of range: give a port 1..65535")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as error:
        raise PortError(f"cannot bind {what} to {host!r}: {error.strerror}") from None
    # Binding first is what makes "another server answered our health check" impossible: Triton
    # would fail to bind, while the other server's endpoint answered in its place.
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # ignore TIME_WAIT leftovers
        try:
            probe.bind(address)
        except OSError as error:
            if error.errno == 98:  # EADDRINUSE
                raise PortError(
                    f"{what} port {port} on {host} is already in use by another process: stop it, "
                    f"or choose another port with --{what}-port"
                ) from None
            raise PortError(f"cannot bind {what} port {port} on {host}: {error.strerror}") from None
    return port


def _connect_host(host: str) -> str:
    """Where to reach a server bound to `host` from this machine."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host.strip("[]") == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is out of range: give a port 1..65535")
    return value
