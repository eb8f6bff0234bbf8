"""A running task's readiness: ``tasks.ready`` is true once its readiness
probe passes and false while it fails (a task that is not ready runs but
does not serve); null for a task that is not running or has no readiness
probe. Rows made before this revision have none until their task starts
again; going down drops the column.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("ready", sa.Boolean()))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("ready")
