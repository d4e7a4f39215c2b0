"""The framework's local-transaction log and inbox (docs/framework.md, "The tables").

Revision ID: 0002
"""

from __future__ import annotations

from framework.tables import alembic_downgrade, alembic_upgrade

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    alembic_upgrade()


def downgrade() -> None:
    alembic_downgrade()
