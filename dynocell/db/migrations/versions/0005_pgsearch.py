"""full-text index of runbook entries on PostgreSQL (tsvector + GIN)

SQLite has its FTS5 ``runbook_fts`` since 0001; this gives PostgreSQL the same
table name and columns, plus a stored generated ``doc`` tsvector (title A,
tags B, body D, ``english`` configuration) with a GIN index. A no-op on SQLite.
Raw SQL (no model): :func:`dynocell.db.session.include_object` keeps it out
of autogenerate, like the FTS5 table.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 09:30:00
"""
from alembic import op


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        "CREATE TABLE runbook_fts ("
        "slug varchar(128) PRIMARY KEY, title text NOT NULL, tags text NOT NULL, body text NOT NULL, "
        "doc tsvector GENERATED ALWAYS AS ("
        "setweight(to_tsvector('english', title), 'A') || "
        "setweight(to_tsvector('english', tags), 'B') || "
        "setweight(to_tsvector('english', body), 'D')) STORED)"
    )
    op.execute("CREATE INDEX runbook_fts_doc ON runbook_fts USING gin (doc)")
    # Entries stored before this migration are indexed by the next load (db.knowledge.upsert_entries
    # re-indexes every slug missing from runbook_fts).


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TABLE IF EXISTS runbook_fts")
