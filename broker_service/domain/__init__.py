"""What sending, half messages, commits and rollbacks mean -- free of FastAPI and SQLAlchemy.

The domain talks to the store only through :mod:`broker_service.domain.ports`.
"""
