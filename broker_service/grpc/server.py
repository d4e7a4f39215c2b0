"""The gRPC port: a ``grpc.aio`` server answering ``apache.rocketmq.v2.MessagingService`` in the
broker process, on uvicorn's event loop (the app's lifespan starts and stops it).

TLS with ``grpc_tls_cert`` / ``grpc_tls_key``.  With the ACL on, a port beyond loopback without
TLS is refused unless ``grpc_allow_insecure``: the clients' signature covers only a date, so
whoever can read the traffic can replay it (docs/acl.md, "RocketMQ 5 clients over gRPC").
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from pathlib import Path

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol.service_pb2_grpc import add_MessagingServiceServicer_to_server

from broker_service.grpc.convert import endpoints_of
from broker_service.grpc.service import MessagingService, Served
from broker_service.settings import BrokerSettings

log = logging.getLogger("halfmq.grpc")

_FRAME_SLACK = 1024 * 1024  # a message's body plus its properties and the request around it


@dataclass(frozen=True, slots=True)
class Listen:
    """Where and how the gRPC port listens."""

    host: str
    port: int
    tls_cert: Path | None = None
    tls_key: Path | None = None
    allow_insecure: bool = False

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None and self.tls_key is not None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_listen(listen: Listen, *, acl: bool) -> None:
    """Refuse (``ValueError``) what would expose signatures that anyone can replay, and half a
    TLS configuration."""
    if (listen.tls_cert is None) != (listen.tls_key is None):
        raise ValueError("--grpc-tls-cert and --grpc-tls-key go together: set both or neither")
    if acl and not listen.tls and not listen.allow_insecure and not is_loopback(listen.host):
        raise ValueError(
            f"the gRPC port on {listen.host} would take signed clients without TLS: their "
            "MQv2-HMAC-SHA1 signature covers only a date, so anyone who reads the traffic can "
            "replay it. Set --grpc-tls-cert and --grpc-tls-key, or --grpc-allow-insecure"
        )


class GrpcServer:
    def __init__(self, served: Served, settings: BrokerSettings, listen: Listen) -> None:
        self.max_body_bytes = settings.max_message_bytes
        self.listen = listen
        self.port = listen.port  # the bound one once started (0 picks a free port)
        self.service = MessagingService(served, settings, self.endpoints)
        self._server: grpc.aio.Server | None = None

    def endpoints(self) -> pb.Endpoints:
        """This port's address, for a route whose request did not say how it reached us."""
        return endpoints_of(f"{self.listen.host}:{self.port}")

    async def start(self) -> None:
        limit = self.max_body_bytes + _FRAME_SLACK
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", limit),
            ]
        )
        add_MessagingServiceServicer_to_server(self.service, server)
        address = f"{self.listen.host}:{self.listen.port}"
        cert, key = self.listen.tls_cert, self.listen.tls_key
        if cert is not None and key is not None:
            credentials = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())])
            self.port = server.add_secure_port(address, credentials)
        else:
            self.port = server.add_insecure_port(address)
        await server.start()
        self._server = server
        log.info(
            "gRPC port (RocketMQ 5's apache.rocketmq.v2) on %s:%d%s",
            self.listen.host,
            self.port,
            " with TLS" if self.listen.tls else "",
        )

    async def stop(self) -> None:
        """Close the Telemetry streams (their clients rebuild them elsewhere), then the port."""
        if self._server is None:
            return
        await self.service.registry.close_all()
        await self._server.stop(grace=1)
        self._server = None
