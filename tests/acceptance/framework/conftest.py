"""The framework's fixtures (tests/integration/framework/conftest.py) for its acceptance tests:
the same user's database, in-process brokers and broker subprocess."""

from tests.integration.framework.conftest import (  # noqa: F401 -- fixtures, found by name
    aconsumers,
    ainproc,
    aproducers,
    bank,
    consumers,
    inproc,
    producers,
    sqlite_broker_process,
)
