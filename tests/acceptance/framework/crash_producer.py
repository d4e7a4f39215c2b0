"""A real producer process built on the framework, for the crash tests.

    python -m tests.acceptance.framework.crash_producer BROKER LOCAL_DB_URL KEY --die before-commit|after-commit [--group G]

It sends one transaction in automatic check mode (``@producer.transactional``) and stops at the
named point, printing the transaction id; the test then kills it with SIGKILL:

* ``before-commit``: inside the local transaction (the effect and the log row written, not committed);
* ``after-commit``: the local transaction committed, the broker's commit not yet sent.

It answers no checks itself (``CheckMode.none()``): a new instance must resolve its transaction.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from sqlalchemy import create_engine, event, insert
from sqlalchemy.orm import Session, sessionmaker

from framework import CheckMode, Message, TransactionProducer
from tests.integration.framework.conftest import effects

HANG = 3600


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("broker")
    parser.add_argument("local_db")
    parser.add_argument("key")
    parser.add_argument("--group", default="bob-bank")
    parser.add_argument("--die", choices=["before-commit", "after-commit"], required=True)
    args = parser.parse_args()

    sessions = sessionmaker(create_engine(args.local_db))
    producer = TransactionProducer(args.group, brokers=[args.broker], check=CheckMode.none())

    @producer.transactional("transfers", session_factory=sessions)
    def debit(session: Session, message: Message, arg: Any) -> None:
        session.execute(insert(effects).values(key=message.keys[0], amount=100))
        session.flush()
        if args.die == "before-commit":
            print(message.transaction_id, flush=True)
            time.sleep(HANG)
        session.info["txid"] = message.transaction_id

    @event.listens_for(sessions, "after_commit")
    def committed(session: Session) -> None:
        if "txid" in session.info:
            print(session.info["txid"], flush=True)
            time.sleep(HANG)

    with producer:
        producer.send_message_in_transaction(Message("transfers", keys=[args.key], body="100"))


if __name__ == "__main__":
    main()
