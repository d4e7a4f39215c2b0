"""Retention: the purge of what is done, never of what is still needed (docs/store.md)."""
