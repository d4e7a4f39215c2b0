"""The broker's ASGI app for ``bench/server_bench.py`` under granian (``--factory
granian_app:app``): the settings from the environment (``HALFMQ_*``), as ``halfmq broker serve``
reads them, and the same app with the server's garbage-collector tuning."""

from __future__ import annotations

import logging

from fastapi import FastAPI

from broker_service.app import build_app
from broker_service.settings import BrokerSettings


def app() -> FastAPI:
    settings = BrokerSettings()
    logging.basicConfig(level=settings.log_level.upper())
    return build_app(settings, server_gc=True)
