"""An event of an application's task (or of the application) names the
store's application it belongs to (and an application's id is never given
again), so that a task's history is its own
application's, not that of an earlier one of the same name, and the events
of a deleted application can be pruned. Rows from before have none.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        # an application's id is never given again once it was deleted (PostgreSQL's never are): its
        # events must not become those of the next application
        with op.batch_alter_table("applications", recreate="always",
                                  table_kwargs={"sqlite_autoincrement": True}):
            pass
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("app_id", sa.Integer))
    op.create_index("ix_events_app_id", "events", ["app_id"])


def downgrade() -> None:
    op.drop_index("ix_events_app_id", table_name="events")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("app_id")
