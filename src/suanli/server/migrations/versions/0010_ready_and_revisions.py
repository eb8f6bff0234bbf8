"""A running task's readiness, and an application's revisions.

- ``tasks.ready``: true once a running task's readiness probe passes and
  false while it fails (a task that is not ready runs but does not serve);
  null for a task that is not running or has no readiness probe. Rows made
  before this revision have none until their task starts again.
- ``applications.revision``: 1 when made, one more for each changed document
  applied (rolled out in place); ``applications.previous``: the document
  before the last change, which ``rollout undo`` applies again.

Going down drops the columns.

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
    with op.batch_alter_table("applications") as batch:
        batch.add_column(sa.Column("revision", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("previous", sa.JSON()))


def downgrade() -> None:
    with op.batch_alter_table("applications") as batch:
        batch.drop_column("previous")
        batch.drop_column("revision")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("ready")
