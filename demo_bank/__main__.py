"""Run one bank as a service: ``python -m demo_bank bob|smith [--port ...]``; the settings are also
``DEMO_BANK_<NAME>`` in the environment.  The bank's database is migrated first.

``python -m demo_bank migrate URL`` only migrates."""

from __future__ import annotations

import logging
from typing import Annotated, Any

import typer
import uvicorn
from fastapi import FastAPI

from demo_bank import db
from demo_bank.settings import BankSettings

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True)


def _serve(bank: str, settings: BankSettings) -> None:
    logging.basicConfig(level="WARNING", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    db.upgrade(settings.database_url)
    uvicorn.run(
        _app(bank, settings),
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
    )


def _app(bank: str, settings: BankSettings) -> FastAPI:
    """The bank on halfmq's framework (REST) or on RocketMQ's Python client (gRPC)."""
    if settings.clients == "rocketmq":
        if bank == "bob":
            from demo_bank import rmq_bob

            return rmq_bob.create_app(settings)
        from demo_bank import rmq_smith

        return rmq_smith.create_app(settings)
    if bank == "bob":
        from demo_bank import bob

        return bob.create_app(settings)
    from demo_bank import smith

    return smith.create_app(settings)


Port = Annotated[int | None, typer.Option(help="Listen port (DEMO_BANK_PORT)")]
Url = Annotated[str | None, typer.Option(help="The bank's database (DEMO_BANK_DATABASE_URL)")]
Broker = Annotated[str | None, typer.Option(help="The broker (DEMO_BANK_BROKER)")]


def _settings(port: int | None, database_url: str | None, broker: str | None) -> BankSettings:
    given: dict[str, Any] = {"port": port, "database_url": database_url, "broker": broker}
    return BankSettings(**{k: v for k, v in given.items() if v is not None})


@app.command()
def bob(port: Port = None, database_url: Url = None, broker: Broker = None) -> None:
    """Bob's bank (the producer)."""
    _serve("bob", _settings(port, database_url, broker))


@app.command()
def smith(port: Port = None, database_url: Url = None, broker: Broker = None) -> None:
    """Smith's bank (the consumer)."""
    _serve("smith", _settings(port, database_url, broker))


@app.command()
def migrate(database_url: str) -> None:
    """Bring a bank's database to the current schema."""
    db.upgrade(database_url)


if __name__ == "__main__":
    app()
