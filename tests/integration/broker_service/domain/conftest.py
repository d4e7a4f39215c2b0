"""The domain's fixtures (tests/unit/broker_service/domain/conftest.py) for the domain's tests
run again here on the SQL stores: each module of this directory imports the tests of the unit
module of its name, and the root conftest keeps their SQLite and PostgreSQL parameters here and
their in-memory one in the unit tier."""

from tests.unit.broker_service.domain.conftest import (  # noqa: F401 -- fixtures, found by name
    any_store,
    domain,
    migrated_url,
    store,
    store_url,
)
