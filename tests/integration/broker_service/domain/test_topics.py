"""tests/unit/broker_service/domain/test_topics.py on the SQL stores (SQLite, PostgreSQL): the unit
tier runs it on the in-memory store, this tier on the stores whose SQL it exercises."""

from tests.unit.broker_service.domain.test_topics import *  # noqa: F403 -- the tests, found by name
