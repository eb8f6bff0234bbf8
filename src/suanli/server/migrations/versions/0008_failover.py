"""Several server processes on one database: the changes the API accepts
are also queued as commands in the store (``commands``), for whichever
controller is active to take, and one controller is active at a time under
a lease in the store (``leases``).

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "commands",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),  # submit | delete | node
        sa.Column("tenant", sa.String(128)),
        sa.Column("name", sa.String(300), nullable=False),  # the application's, or the node's
        sa.Column("app_id", sa.Integer),
        sa.Column("action", sa.String(16)),  # a node's: cordon | drain | uncordon
        sqlite_autoincrement=True,
    )
    op.create_table(
        "leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(128), nullable=False),
        sa.Column("address", sa.String(300)),
        sa.Column("epoch", sa.Integer, nullable=False),  # bumps when another holder takes it
        sa.Column("expires_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("leases")
    op.drop_table("commands")
