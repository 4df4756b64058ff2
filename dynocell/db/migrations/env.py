"""Alembic environment: batch mode for SQLite only (it cannot ALTER most things), the ORM tables'
MetaData (db/tables.py) as target."""

from alembic import context
from sqlalchemy import create_engine

from dynocell.db.tables import Base
from dynocell.errors import StoreUnavailable
from dynocell.db.session import FTS_TABLES, include_object  # noqa: F401 - shared with tests

config = context.config
target_metadata = Base.metadata


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        url = config.get_main_option("sqlalchemy.url")
        if url is None:  # dynocell's alembic config always sets it (db/session.py); a bare `alembic` run may not
            raise StoreUnavailable("the migration config names no store: sqlalchemy.url is not set",
                                   "let dynocell migrate the store (it does on opening one), "
                                   "or build the config with dynocell.db.session.alembic_config(url)")
        connectable = create_engine(url)
        with connectable.connect() as connection:
            _configure_and_run(connection)
            connection.commit()
    else:
        _configure_and_run(connection)


def _configure_and_run(connection) -> None:  # noqa: ANN001
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        include_object=include_object,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


run()
