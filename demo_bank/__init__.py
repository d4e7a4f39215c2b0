"""demo_bank: not built yet (see the open issues)."""
