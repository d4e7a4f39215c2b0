"""The framework and the CLI against the real broker with the ACL on: signed producers and consumers
run a transfer, refusals arrive as the framework's exceptions, the broker signs its push checks and
the producers' check servers verify them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from framework import (
    AsyncPushConsumer,
    AsyncTransactionProducer,
    AuthenticationError,
    CheckMode,
    ClockSkewError,
    ConsumeResult,
    Credentials,
    LocalTransactionState,
    Message,
    PermissionDeniedError,
    PushConsumer,
    TransactionProducer,
)
from framework.signing import HalfmqAuth
from halfmq.cli import app as cli_app
from halfmq.testing import InProcessBroker
from tests.integration.framework.helpers import await_resolved, wait_resolved
from tests.integration.framework.signed_http import BOB, SMITH, now_ms
from tests.support import BrokerProcess, free_port, wait_until

State = LocalTransactionState
OPERATOR = Credentials("operator", "operator-secret-2026")
ACL = f"""
accounts:
  - accessKey: {BOB.access_key}
    secretKey: {BOB.secret_key}
    topicPerms:
      - transfers=PUB
    groupPerms:
      - bob-bank=PUB
  - accessKey: {SMITH.access_key}
    secretKey: {SMITH.secret_key}
    topicPerms:
      - transfers=SUB
    groupPerms:
      - smith-bank=SUB
  - accessKey: {OPERATOR.access_key}
    secretKey: {OPERATOR.secret_key}
    admin: true
"""
PULL = CheckMode.pull(wait_seconds=0.3)


@pytest.fixture(autouse=True)
def no_keys_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HALFMQ_ACCESS_KEY", raising=False)
    monkeypatch.delenv("HALFMQ_SECRET_KEY", raising=False)


@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL)
    return path


@pytest.fixture
def guarded(acl_file: Path) -> Iterator[InProcessBroker]:
    """The broker with the ACL on; its own helpers sign as the operator."""
    with InProcessBroker(acl_file=acl_file, credentials=OPERATOR) as broker:
        broker.create_topic("transfers")
        yield broker


def producer_on(broker: InProcessBroker, **options: object) -> TransactionProducer:
    options.setdefault("check", PULL)
    options.setdefault("credentials", BOB)
    return TransactionProducer(
        "bob-bank",
        brokers=[broker.url],
        transport=broker.transport,
        **options,  # type: ignore[arg-type]
    )


def test_acl_signed_faces_run_a_transfer(guarded: InProcessBroker) -> None:
    received: list[Message] = []
    producer = producer_on(guarded)
    producer.execute_local_transaction("transfers")(lambda m, arg: State.COMMIT_MESSAGE)
    consumer = PushConsumer(
        "smith-bank",
        brokers=[guarded.url],
        transport=guarded.transport,
        credentials=SMITH,
        wait_seconds=0.5,
        consume_from="FIRST_OFFSET",
    )

    @consumer.subscribe("transfers")
    def credit(message: Message) -> ConsumeResult:
        received.append(message)
        return ConsumeResult.CONSUME_SUCCESS

    with producer, consumer:
        result = producer.send_message_in_transaction(Message("transfers", body="Bob pays 100"))
        assert result.resolution == "COMMITTED"
        wait_until(lambda: len(received) == 1, 15, "Smith to receive the transfer")
    assert received[0].body == "Bob pays 100"


async def test_acl_signed_async_faces_run_a_transfer(acl_file: Path) -> None:
    received: list[Message] = []
    async with InProcessBroker(acl_file=acl_file, credentials=OPERATOR) as broker:
        await broker.acreate_topic("transfers")
        producer = AsyncTransactionProducer(
            "bob-bank",
            brokers=[broker.url],
            transport=broker.async_transport,
            credentials=("bob-bank", BOB.secret_key),
            check=PULL,
        )
        producer.execute_local_transaction("transfers")(lambda m, arg: State.COMMIT_MESSAGE)
        consumer = AsyncPushConsumer(
            "smith-bank",
            brokers=[broker.url],
            transport=broker.async_transport,
            credentials=SMITH,
            wait_seconds=0.5,
            consume_from="FIRST_OFFSET",
        )
        consumer.subscribe("transfers")(lambda m: received.append(m))
        async with producer, consumer:
            result = await producer.send_message_in_transaction(Message("transfers", body="x"))
            assert result.resolution == "COMMITTED"
            for _ in range(300):
                if received:
                    break
                await asyncio.sleep(0.05)
    assert [m.body for m in received] == ["x"]


def test_acl_an_unsigned_producer_is_refused(guarded: InProcessBroker) -> None:
    with (
        producer_on(guarded, credentials=None, check=CheckMode.none()) as producer,
        pytest.raises(AuthenticationError) as raised,
    ):
        producer.send(Message("transfers", body="x"))
    assert raised.value.code == "SIGNATURE_MISSING"


def test_acl_a_wrong_secret_is_refused(guarded: InProcessBroker) -> None:
    wrong = Credentials(BOB.access_key, "not-bobs-secret")
    with (
        producer_on(guarded, credentials=wrong, check=CheckMode.none()) as producer,
        pytest.raises(AuthenticationError) as raised,
    ):
        producer.send(Message("transfers", body="x"))
    assert raised.value.code == "SIGNATURE_INVALID"
    assert "not-bobs-secret" not in f"{raised.value!s} {raised.value!r}"


def test_acl_a_skewed_clock_is_reported_with_its_skew(guarded: InProcessBroker) -> None:
    with producer_on(guarded, check=CheckMode.none()) as producer:
        producer.client.http.auth = HalfmqAuth(BOB, clock_ms=lambda: now_ms() + 600_000)
        with pytest.raises(ClockSkewError, match=r"the local clock is 60\d\.\d s ahead") as raised:
            producer.send(Message("transfers", body="x"))
    assert raised.value.skew_seconds is not None
    assert 599 < raised.value.skew_seconds < 660


def test_acl_a_missing_permission_is_refused(guarded: InProcessBroker) -> None:
    producer = TransactionProducer(
        "smith-bank",
        brokers=[guarded.url],
        transport=guarded.transport,
        credentials=SMITH,
        check=CheckMode.none(),
    )
    with producer, pytest.raises(PermissionDeniedError) as raised:
        producer.send(Message("transfers", body="Smith pays himself"))
    assert raised.value.code == "PERMISSION_DENIED"
    assert raised.value.detail["access_key"] == "smith-bank"


def test_acl_push_checks_are_signed_and_verified(guarded: InProcessBroker) -> None:
    checked: list[str | None] = []
    producer = producer_on(guarded, check=CheckMode.push())
    producer.execute_local_transaction("transfers")(lambda m, arg: State.UNKNOW)

    @producer.check_local_transaction("transfers")
    def check(message: Message) -> LocalTransactionState:
        checked.append(message.transaction_id)
        return State.COMMIT_MESSAGE

    producer.serve_checks()
    try:
        producer.start()
        result = producer.send_message_in_transaction(Message("transfers", body="x"))
        record = wait_resolved(producer, result.transaction_id)
    finally:
        producer.shutdown()
    assert record["state"] == "COMMITTED"
    assert result.transaction_id in checked  # the check verified, so the checker ran


async def test_acl_async_push_checks_are_signed_and_verified(acl_file: Path) -> None:
    checked: list[str | None] = []
    async with InProcessBroker(acl_file=acl_file, credentials=OPERATOR) as broker:
        await broker.acreate_topic("transfers")
        producer = AsyncTransactionProducer(
            "bob-bank",
            brokers=[broker.url],
            transport=broker.async_transport,
            credentials=BOB,
            check=CheckMode.push(),
        )
        producer.execute_local_transaction("transfers")(lambda m, arg: State.UNKNOW)

        @producer.check_local_transaction("transfers")
        async def check(message: Message) -> LocalTransactionState:
            checked.append(message.transaction_id)
            return State.COMMIT_MESSAGE

        await producer.serve_checks()
        try:
            await producer.start()
            result = await producer.send_message_in_transaction(Message("transfers", body="x"))
            record = await await_resolved(producer, result.transaction_id)
        finally:
            await producer.shutdown()
    assert record["state"] == "COMMITTED"
    assert result.transaction_id in checked


def test_acl_the_cli_signs_against_a_broker_process(
    sqlite_url: str, acl_file: Path, tmp_path: Path
) -> None:
    from broker_service.store import migrate

    migrate.upgrade(sqlite_url)
    broker = BrokerProcess(sqlite_url, free_port(), tmp_path / "broker.log", "--acl", str(acl_file))
    broker.start()
    try:
        runner = CliRunner()
        env = {"HALFMQ_BROKER": broker.url, "COLUMNS": "250"}
        signed = runner.invoke(
            cli_app,
            ["topic", "create", "transfers", "--access-key", OPERATOR.access_key],
            env={**env, "HALFMQ_SECRET_KEY": OPERATOR.secret_key},
        )
        assert signed.exit_code == 0, signed.output
        unsigned = runner.invoke(cli_app, ["topic", "list"], env={**env, "HALFMQ_ACCESS_KEY": None})
        assert unsigned.exit_code == 1
        lines = [line for line in unsigned.stderr.splitlines() if line.strip()]
        assert len(lines) == 1
        assert lines[0].startswith("error: SIGNATURE_MISSING (HTTP 401)")
    finally:
        broker.stop()
