"""Alembic environment: batch mode for SQLite, the models' MetaData as target."""

from alembic import context
from sqlalchemy import create_engine

from dynocell.db.models import Base

config = context.config
target_metadata = Base.metadata
FTS_TABLES = ("runbook_fts",)


def include_object(obj, name, type_, reflected, compare_to):  # noqa: ANN001
    """Leave the FTS5 virtual table and its shadow tables out of autogenerate."""
    if type_ == "table" and name and name.startswith(FTS_TABLES):
        return False
    return True


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        connectable = create_engine(config.get_main_option("sqlalchemy.url"))
        with connectable.connect() as connection:
            _configure_and_run(connection)
            connection.commit()
    else:
        _configure_and_run(connection)


def _configure_and_run(connection) -> None:  # noqa: ANN001
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        include_object=include_object,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


run()
