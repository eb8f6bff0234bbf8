"""The first schema: tokens, applications, tasks, events, node states.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("tenant", sa.String(128)),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "applications",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("document", sa.JSON, nullable=False),
        sa.Column("idempotency_key", sa.String(256)),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.UniqueConstraint("tenant", "name", name="uq_app_name"),
        sa.UniqueConstraint("tenant", "idempotency_key", name="uq_app_idempotency"),
    )
    op.create_table(
        "tasks",
        sa.Column("tenant", sa.String(128), primary_key=True),
        sa.Column("name", sa.String(400), primary_key=True),
        sa.Column("app_id", sa.Integer, sa.ForeignKey("applications.id", ondelete="CASCADE"), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("vc", sa.String(300)),
        sa.Column("host", sa.String(300)),
        sa.Column("node", sa.String(300)),
        sa.Column("site", sa.String(128)),
        sa.Column("reasons", sa.JSON),
        sa.Column("placements", sa.Integer, nullable=False),
        sa.Column("submitted_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float),
        sa.Column("ended_at", sa.Float),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ix_tasks_app_id", "tasks", ["app_id"])
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("tenant", sa.String(128)),
        sa.Column("task", sa.String(400)),
        sa.Column("body", sa.JSON, nullable=False),
    )
    op.create_index("ix_events_tenant_id", "events", ["tenant", "id"])
    op.create_index("ix_events_task", "events", ["tenant", "task"])
    op.create_table(
        "node_states",
        sa.Column("node", sa.String(300), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("node_states")
    op.drop_index("ix_events_task", "events")
    op.drop_index("ix_events_tenant_id", "events")
    op.drop_table("events")
    op.drop_index("ix_tasks_app_id", "tasks")
    op.drop_table("tasks")
    op.drop_table("applications")
    op.drop_table("tokens")
