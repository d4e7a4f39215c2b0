"""The instance that sent a half is kept with it, set only by the broker: a client cannot name
one, and the committed message does not carry the note."""

from __future__ import annotations

import pytest

from broker_service.domain.errors import InvalidRequest
from broker_service.domain.messages.model import MessageDraft
from broker_service.domain.ports import MessageQuery
from broker_service.domain.transactions.halves import Resolving
from broker_service.domain.transactions.model import PROP_SENT_BY, Decision, ResolvedBy
from tests.support import BrokerApp
from tests.unit.broker_service.domain.conftest import Domain


async def test_a_half_naming_its_sender_itself_is_refused(domain: Domain) -> None:
    await domain.messages.create_topic("transfers", 2, False)
    draft = MessageDraft(b"transfer", properties={PROP_SENT_BY: "someone-else"})
    with pytest.raises(InvalidRequest) as refused:
        await domain.transactions.prepare("transfers", draft, "bob", None, "me")
    assert refused.value.code == "RESERVED_PROPERTY"


async def test_the_sender_is_kept_in_the_half_and_left_out_of_the_commit(domain: Domain) -> None:
    await domain.messages.create_topic("transfers", 2, False)
    draft = MessageDraft(b"transfer", properties={"origin": "bank"})
    receipt = await domain.transactions.prepare("transfers", draft, "bob", None, "client-1")
    (half,) = await domain.messages.query_messages(
        MessageQuery(topic="RMQ_SYS_TRANS_HALF_TOPIC", limit=10)
    )
    assert half.properties[PROP_SENT_BY] == "client-1"
    resolving = Resolving(receipt.transaction_id, Decision.COMMIT, "bob", ResolvedBy.PRODUCER)
    await domain.transactions.resolve(resolving)
    (real,) = await domain.messages.query_messages(MessageQuery(topic="transfers", limit=10))
    assert PROP_SENT_BY not in real.properties
    assert real.properties["origin"] == "bank"


async def test_over_rest_a_half_naming_its_sender_is_422_reserved_property(
    broker: BrokerApp,
) -> None:
    await broker.topic("transfers", queues=2)
    half = {
        "topic": "transfers",
        "producer_group": "bob",
        "body": "x",
        "properties": {PROP_SENT_BY: "someone-else"},
    }
    answer = await broker.client.post("/v1/transactions", json=half)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "RESERVED_PROPERTY"
