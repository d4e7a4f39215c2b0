"""Background work a broker does on its own: the check-back rounds (and, later, delayed releases)."""
