"""hosts: the machines writing to the store; host_id on boots, runs and profile runs

``host_id`` columns are added with plain ALTER TABLE … ADD COLUMN (nullable,
indexed, no declared foreign key), which SQLite does in place: no batch
table rebuild, so populated stores with foreign keys on migrate safely.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 09:40:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

HOST_TABLES = ("boots", "runs", "profile_runs")


def upgrade() -> None:
    op.create_table('hosts',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('hostname', sa.String(length=255), nullable=False),
    sa.Column('os', sa.Text(), nullable=False),
    sa.Column('cpu', sa.Text(), nullable=False),
    sa.Column('cpu_count', sa.Integer(), nullable=False),
    sa.Column('memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('gpus', sa.JSON(), nullable=False),
    sa.Column('cuda', sa.String(length=32), nullable=True),
    sa.Column('engine_versions', sa.JSON(), nullable=False),
    sa.Column('first_seen_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_seen_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_hosts'))
    )
    for table in HOST_TABLES:
        op.add_column(table, sa.Column('host_id', sa.String(length=64), nullable=True))
        op.create_index(op.f(f'ix_{table}_host_id'), table, ['host_id'], unique=False)


def downgrade() -> None:
    for table in HOST_TABLES:
        op.drop_index(op.f(f'ix_{table}_host_id'), table_name=table)
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column('host_id')
    op.drop_table('hosts')
