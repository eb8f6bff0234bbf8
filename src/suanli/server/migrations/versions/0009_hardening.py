"""The control plane hardened against its tenants, its agents and itself.

- ``tokens.minted_by``: the public id of the token that minted it (None: made
  at start, or before this was recorded); a tenant-admin's revocation reaches
  the tokens it minted, and theirs.
- ``tokens.tenant_since``: the configuration version at which the token's
  tenant was made: a tenant deleted and made again under the same name is
  another tenant, whose tokens the old ones are not.
- ``tokens.scope``: an agent token's scope (the sites and node names it may
  register, and how many nodes at once).
- ``leases.pid`` and ``leases.host``: the process holding a lease, so that a
  server that starts beside an earlier one's orphaned controller can tell.
- ``objects.failed``: why a stored document is not applied (one that cannot
  be handled is set aside, with the reason, and the server starts without it).

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("minted_by", sa.String(16)))
        batch.add_column(sa.Column("tenant_since", sa.Integer))
        batch.add_column(sa.Column("scope", sa.JSON))
    op.create_index("ix_tokens_minted_by", "tokens", ["minted_by"])
    with op.batch_alter_table("leases") as batch:
        batch.add_column(sa.Column("pid", sa.Integer))
        batch.add_column(sa.Column("host", sa.String(255)))
    with op.batch_alter_table("objects") as batch:
        batch.add_column(sa.Column("failed", sa.String(1000)))


def downgrade() -> None:
    with op.batch_alter_table("objects") as batch:
        batch.drop_column("failed")
    with op.batch_alter_table("leases") as batch:
        batch.drop_column("host")
        batch.drop_column("pid")
    op.drop_index("ix_tokens_minted_by", table_name="tokens")
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("scope")
        batch.drop_column("tenant_since")
        batch.drop_column("minted_by")
