"""Alembic's environment: migrations run online against the URL the store gives."""

from alembic import context
from sqlalchemy import engine_from_config, pool

from suanli.server.store import Base

config = context.config
target_metadata = Base.metadata


def run() -> None:
    engine = engine_from_config(config.get_section(config.config_ini_section, {}), prefix="sqlalchemy.",
                                poolclass=pool.NullPool)
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run()
