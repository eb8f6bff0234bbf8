"""Agents that execute: what each agent's node is to run, and what agents report.

- ``assignments``: per (node, task), what the active controller wants of
  the task there (run, stop keeping its state, end), with how it starts;
  ``changed`` rises with each write (``assignment_marks`` keeps the last,
  so marks rise whatever is removed), so an agent waits for a newer one.
- ``agent_reports``: an agent's exits, stops and notes of its node's tasks,
  taken by the controller in id order, then removed.

Going down drops both tables.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "assignments",
        sa.Column("node", sa.String(300), primary_key=True),
        sa.Column("task", sa.String(600), primary_key=True),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("want", sa.String(8), nullable=False),
        sa.Column("held", sa.Boolean(), nullable=False),
        sa.Column("adopt", sa.Boolean(), nullable=False),
        sa.Column("launch", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(8), nullable=False),
        sa.Column("changed", sa.Integer(), nullable=False),
    )
    op.create_index("ix_assignments_changed", "assignments", ["changed"])
    op.create_table(
        "assignment_marks",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("value", sa.Integer(), nullable=False),
    )
    op.create_table(
        "agent_reports",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("node", sa.String(300), nullable=False),
        sa.Column("task", sa.String(600), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    op.drop_table("agent_reports")
    op.drop_table("assignment_marks")
    op.drop_index("ix_assignments_changed", "assignments")
    op.drop_table("assignments")
