"""What a server runs is changed through its API: the Fleet, Tenant and
VirtualCluster documents (``objects``, each with the configuration's
version after its last change), nodes that registered themselves
(``agents``, with their leases), and tokens with a role.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "objects",
        sa.Column("kind", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(300), primary_key=True),
        sa.Column("tenant", sa.String(128)),
        sa.Column("document", sa.JSON, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ix_objects_version", "objects", ["version"])
    op.create_table(
        "config_versions",  # one row per change of the objects (a deletion too): its id is the version
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "agents",
        sa.Column("name", sa.String(300), primary_key=True),  # the node's name: SITE/NAME, or a device's site
        sa.Column("site", sa.String(128), nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),  # its node as registered (a NodeGroup spec without count)
        sa.Column("lease_s", sa.Float, nullable=False),
        sa.Column("state", sa.String(8), nullable=False),  # ready | lost | left
        sa.Column("token_id", sa.String(32)),
        sa.Column("registered_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("changed", sa.Integer, nullable=False),  # bumps on registration, loss and leave (not renewal)
    )
    op.create_index("ix_agents_state_expires", "agents", ["state", "expires_at"])
    op.create_index("ix_agents_changed", "agents", ["changed"])
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("role", sa.String(16), nullable=False, server_default="member"))
    op.execute("UPDATE tokens SET role = 'admin' WHERE tenant IS NULL")


def downgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("role")
    op.drop_index("ix_agents_changed", table_name="agents")
    op.drop_index("ix_agents_state_expires", table_name="agents")
    op.drop_table("agents")
    op.drop_table("config_versions")
    op.drop_index("ix_objects_version", table_name="objects")
    op.drop_table("objects")
