"""What sending, half messages, commits and rollbacks, and consumer groups mean -- free of FastAPI
and SQLAlchemy.

Grouped by concept: :mod:`.messages`, :mod:`.transactions`, :mod:`.consumers`, each with its
records (``model.py``) and one service; what they share at the top (errors, clock, ids, names,
config).  The domain talks to the store only through :mod:`broker_service.domain.ports`.
"""
