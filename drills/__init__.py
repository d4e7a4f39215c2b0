"""Drills: whole-system rehearsals run from the source tree, not shipped in the wheel.

* :mod:`drills.pg_cluster` -- a PostgreSQL primary and its synchronous standby built from the
  machine's PostgreSQL binaries on free loopback ports (promote, kill, wait);
* :mod:`drills.failover` -- the failover drill: brokers on that cluster, a producer and a
  consumer as load, the primary killed and the standby promoted, every answer checked against
  the store;
* :mod:`drills.brokers` -- several brokers as real processes on one store, and the audit of
  what they did from the store's own records.

Their users are the tests (tests/acceptance/broker_service/store/ and
tests/integration/broker_service/store/) and the benches (bench/failover_bench.py,
bench/brokers_bench.py); they run from a checkout (``pip install -e .`` puts its root on the
path), and may import every part of the house, as tests/ and bench/ do (docs/architecture.md).
"""
