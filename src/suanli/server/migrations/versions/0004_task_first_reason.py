"""A pending (or omitted) task keeps its first reason apart, its code and
its text (the binding constraint when there is one), so that the console
can filter and count tasks by what stops them without reading every row's
reasons. Indexed with the status; events are indexed by kind too (the
console's moves and incidents).

Rows made before this revision have none until their task is tried again;
going down drops the columns.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("reason_code", sa.String(32)))
        batch.add_column(sa.Column("reason", sa.String(400)))
    op.create_index("ix_tasks_status_reason", "tasks", ["status", "reason_code"])
    op.create_index("ix_events_kind_id", "events", ["kind", "id"])


def downgrade() -> None:
    op.drop_index("ix_events_kind_id", table_name="events")
    op.drop_index("ix_tasks_status_reason", table_name="tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("reason")
        batch.drop_column("reason_code")
