"""The ``halfmq`` command line (Typer + Rich).

``halfmq broker serve`` and ``halfmq db upgrade`` work on the store directly; every other command
talks REST to ``--broker URL`` (env ``HALFMQ_BROKER``, default http://127.0.0.1:9876).
"""

from __future__ import annotations

import typer

from broker_service.cli import broker, db

app = typer.Typer(
    name="halfmq",
    help="RocketMQ-style transactional (half) messages for Python microservices.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(broker.app, name="broker")
app.add_typer(db.app, name="db")


def main() -> None:
    app()
