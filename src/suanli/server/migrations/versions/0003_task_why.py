"""A pending task keeps its reasons in reading order, the binding constraint
first with its figures (``why``), beside the reason map it had.

Rows made before this revision have no ``why`` until their task is tried
again; going down drops the column.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("why", sa.JSON))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("why")
