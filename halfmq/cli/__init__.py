"""The ``halfmq`` command line (Typer + Rich).

``halfmq broker serve``, ``halfmq db upgrade``, ``halfmq export`` and ``halfmq reconcile`` work on
the store directly; every other command talks REST to ``--broker URL`` (env ``HALFMQ_BROKER``,
default http://127.0.0.1:9876), signing its requests with ``--access-key`` / ``--secret-key`` (env
``HALFMQ_ACCESS_KEY`` / ``HALFMQ_SECRET_KEY``) for a broker with the ACL on.
"""

from __future__ import annotations

import typer

from halfmq.cli import (
    acl,
    broker,
    consume,
    db,
    demo,
    dlq,
    framework_tables,
    groups,
    messages,
    send,
    store,
    topics,
    transactions,
)
from spark_reconcile import cli as reconcile_cli

app = typer.Typer(
    name="halfmq",
    help="RocketMQ-style transactional (half) messages for Python microservices.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # click's own help layout: Rich's option table cuts long flag names (--transaction-check-
    # interval-seconds, a --no- twin) at 80 columns, click's puts a long name on a line of its own
    rich_markup_mode=None,
)
app.add_typer(broker.app, name="broker")
app.add_typer(db.app, name="db")
app.add_typer(topics.app, name="topic")
app.command("send")(send.send)
app.add_typer(transactions.app, name="transaction")
app.add_typer(messages.app, name="message")
app.add_typer(groups.app, name="group")
app.add_typer(dlq.app, name="dlq")
app.add_typer(acl.app, name="acl")
app.add_typer(store.app, name="store")
app.add_typer(framework_tables.app, name="framework")
app.command("consume")(consume.consume)
app.command("demo")(demo.demo)
# The reconciliation job's commands import pyspark / pyarrow only when run.
app.command("export")(reconcile_cli.export)
app.command("reconcile")(reconcile_cli.reconcile)


def main() -> None:
    app()
