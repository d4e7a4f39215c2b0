"""The REST contract's bodies (docs/api.md) as pydantic models, one module per concept; they describe
``/openapi.json``.  See :mod:`.common` for what they share."""
