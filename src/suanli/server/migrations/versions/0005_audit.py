"""Who changed what: one row per request that asked for a change (its time,
the token's public id and tenant, the method and route, the object, the
status it got, the request id), read by admins.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("token_id", sa.String(32)),
        sa.Column("tenant", sa.String(128)),
        sa.Column("admin", sa.Boolean, nullable=False),
        sa.Column("action", sa.String(200), nullable=False),
        sa.Column("object", sa.String(1000), nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("address", sa.String(64)),
    )
    op.create_index("ix_audit_tenant_id", "audit", ["tenant", "id"])


def downgrade() -> None:
    op.drop_index("ix_audit_tenant_id", table_name="audit")
    op.drop_table("audit")
