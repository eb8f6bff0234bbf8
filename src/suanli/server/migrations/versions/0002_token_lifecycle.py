"""Tokens get a lifecycle: a public id, a name, where they came from, how they
are hashed, when they expire and when they were revoked.

Rows made before this revision keep their digest (unkeyed SHA-256: ``scheme``
'sha256') and stay valid; each gets a public id now. New rows are keyed
(HMAC-SHA256 with the server's secret, ``scheme`` 'hmac-sha256'). Which of the
old admin tokens came from ``SUANLI_ADMIN_TOKEN`` is not recorded anywhere, so
every old row is 'minted'; the server marks the env one 'env' when it next
starts with that value.

Going down drops the new columns: revocations and expiry are forgotten, and
tokens made with a key no longer match (the older code hashes without one).

Revision ID: 0002
Revises: 0001
"""

import secrets

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"  # as suanli.server.store.TOKEN_ID_ALPHABET


def _public_id() -> str:
    return "tok_" + "".join(secrets.choice(ID_ALPHABET) for _ in range(8))


def upgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("public_id", sa.String(16)))
        batch.add_column(sa.Column("name", sa.String(200)))
        batch.add_column(sa.Column("source", sa.String(8), nullable=False, server_default="minted"))
        batch.add_column(sa.Column("scheme", sa.String(16), nullable=False, server_default="sha256"))
        batch.add_column(sa.Column("expires_at", sa.Float))
        batch.add_column(sa.Column("revoked_at", sa.Float))
    conn = op.get_bind()
    tokens = sa.table("tokens", sa.column("id", sa.Integer), sa.column("public_id", sa.String))
    ids = list(conn.execute(sa.select(tokens.c.id)).scalars())
    fresh: set[str] = set()
    for row_id in ids:  # a public id for every existing row, none twice
        public = _public_id()
        while public in fresh:
            public = _public_id()
        fresh.add(public)
        conn.execute(tokens.update().where(tokens.c.id == row_id).values(public_id=public))
    with op.batch_alter_table("tokens") as batch:
        batch.alter_column("public_id", existing_type=sa.String(16), nullable=False)
        batch.create_unique_constraint("uq_tokens_public_id", ["public_id"])


def downgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.drop_constraint("uq_tokens_public_id", type_="unique")
        for column in ("revoked_at", "expires_at", "scheme", "source", "name", "public_id"):
            batch.drop_column(column)
