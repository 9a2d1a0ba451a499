"""TLS for sam3-serve: the certificate files, checked, and the warnings for plaintext."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from napari_sam3.core.errors import InvalidInput
from napari_sam3.core.files import read_pem
from napari_sam3.serving.ports import is_loopback


@dataclass(frozen=True)
class TlsFiles:
    """PEM files for gRPC over TLS; `root_cert` also makes clients present certificates."""

    cert: Path
    key: Path
    root_cert: Path | None = None

    def check(self) -> None:
        for what, path, marker in (
            ("certificate", self.cert, "-----BEGIN CERTIFICATE-----"),
            ("key", self.key, "PRIVATE KEY-----"),
            ("root certificate", self.root_cert, "-----BEGIN CERTIFICATE-----"),
        ):
            if path is None:
                continue
            try:
                read_pem(path, what, marker)
            except FileNotFoundError as error:  # the command reports a ValueError as a refusal
                raise InvalidInput(str(error)) from None

    def triton_args(self) -> list[str]:
        args = [
            "--grpc-use-ssl=true",
            f"--grpc-server-cert={Path(self.cert).resolve()}",
            f"--grpc-server-key={Path(self.key).resolve()}",
        ]
        if self.root_cert is not None:
            args += [
                f"--grpc-root-cert={Path(self.root_cert).resolve()}",
                "--grpc-use-ssl-mutual=true",
            ]
        return args


def plaintext_warnings(host: str, http_host: str, tls: bool) -> list[str]:
    """Warnings for plaintext endpoints bound beyond loopback."""
    warnings = []
    if not tls and not is_loopback(host):
        warnings.append(
            f"gRPC on {host} is plaintext: images and results cross the network unencrypted and "
            "anyone who reaches the port can use it. Serve with --tls-cert/--tls-key, or keep "
            "--host 127.0.0.1 and reach it through an SSH tunnel or a TLS proxy"
        )
    if not is_loopback(http_host):
        warnings.append(
            f"HTTP on {http_host} is plaintext (Triton's HTTP endpoint has no TLS): keep "
            "--http-host 127.0.0.1 unless a TLS proxy fronts it"
        )
    return warnings
