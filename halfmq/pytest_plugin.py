"""The halfmq pytest plugin: a real broker for your tests, as a fixture.

Installing halfmq registers it (the ``pytest11`` entry point), so a test asks for it by name, with
nothing to import or configure::

    def test_transfer(in_process_broker):
        in_process_broker.create_topic("transfers")
        producer = TransactionProducer(
            "bob-bank", brokers=[in_process_broker.url], transport=in_process_broker.transport
        )
        ...

    async def test_transfer_async(async_in_process_broker):   # with pytest-asyncio
        await async_in_process_broker.acreate_topic("transfers")
        ...

Each test gets its own :class:`~halfmq.testing.InProcessBroker`: the real broker app on a private
SQLite file, removed after the test.  ``@pytest.mark.halfmq_broker(**settings)`` passes broker
settings (``acl_file=...``, ``credentials=...``, ``max_reconsume_times=1``...).  The async
fixture exists when pytest-asyncio is installed: an async fixture needs its event loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # the broker is imported by the first test that asks for one, not at start
    from halfmq.testing import InProcessBroker

MARKER = "halfmq_broker"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(**settings): the settings of the test's in-process halfmq broker"
    )


def _settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    marker = request.node.get_closest_marker(MARKER)
    return {} if marker is None else dict(marker.kwargs)


@pytest.fixture
def in_process_broker(request: pytest.FixtureRequest) -> Iterator[InProcessBroker]:
    """A running in-process broker for sync clients: ``transport=in_process_broker.transport``."""
    from halfmq.testing import InProcessBroker

    with InProcessBroker(**_settings(request)) as broker:
        yield broker


try:
    import pytest_asyncio
except ImportError:  # no async fixture without an event loop to run it on
    pass
else:

    @pytest_asyncio.fixture
    async def async_in_process_broker(
        request: pytest.FixtureRequest,
    ) -> AsyncIterator[InProcessBroker]:
        """A running in-process broker for asyncio clients, on the test's event loop:
        ``transport=async_in_process_broker.async_transport``."""
        from halfmq.testing import InProcessBroker

        async with InProcessBroker(**_settings(request)) as broker:
            yield broker
