"""A real idempotent consumer process for the crash tests.

    python -m tests.acceptance.framework.crash_consumer BROKER LOCAL_DB_URL GROUP [--topic T]

It consumes ``transfers`` (or T) with ``idempotent=`` the local database, credits ``effects`` and, right
after the first local commit, prints the message's key and hangs before its ack: the test kills
it with SIGKILL, so the broker delivers the message again to the next member.
"""

from __future__ import annotations

import argparse
import time

from sqlalchemy import create_engine, event, update
from sqlalchemy.orm import Session, sessionmaker

from framework import Message
from framework.consumer import PushConsumer
from tests.integration.framework.conftest import effects


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("broker")
    parser.add_argument("local_db")
    parser.add_argument("group")
    parser.add_argument("--topic", default="transfers")
    args = parser.parse_args()
    sessions = sessionmaker(create_engine(args.local_db))
    consumer = PushConsumer(
        args.group,
        brokers=[args.broker],
        consume_from="FIRST_OFFSET",
        invisible_seconds=1.0,
        wait_seconds=0.5,
    )

    @consumer.subscribe(args.topic, idempotent=sessions)
    def credit(session: Session, message: Message) -> None:
        session.execute(
            update(effects)
            .where(effects.c.key == message.keys[0])
            .values(amount=effects.c.amount + 1)
        )
        session.info["key"] = message.keys[0]

    @event.listens_for(sessions, "after_commit")
    def committed(session: Session) -> None:
        if "key" in session.info:
            print(session.info["key"], flush=True)
            time.sleep(3600)

    consumer.start()
    time.sleep(3600)


if __name__ == "__main__":
    main()
