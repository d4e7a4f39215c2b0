"""The half-message protocol: halves, commit and rollback resolved exactly once, check-back of
silent producers, and where a push check may go."""
