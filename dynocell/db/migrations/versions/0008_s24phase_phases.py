"""profile_phases: a profile window's speculative step split by phase (issue 24 item 3)

One row per profile run: ``state`` (split | unavailable), ``source``, ``total_ms``, the phases
(``[{phase, label, ms, pct, launches, launches_per_token, ranges}]``) and per-rank phases as JSON,
and the ``reason`` when the split is unavailable. A new table only: existing rows are untouched,
and profiles stored before it get their split by ``dynocell reanalyze RUN``.

Revision ID: 0008_s24phase_phases
Revises: 0007_s23core_liveness
Create Date: 2026-12-01 15:40:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0008_s24phase_phases'
down_revision = '0007_s23core_liveness'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('profile_phases',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('profile_id', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('source', sa.String(length=16), nullable=True),
    sa.Column('total_ms', sa.Float(), nullable=True),
    sa.Column('phases', sa.JSON(), nullable=False),
    sa.Column('ranks', sa.JSON(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['profile_id'], ['profile_runs.id'],
                            name=op.f('fk_profile_phases_profile_id_profile_runs')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_profile_phases'))
    )
    op.create_index(op.f('ix_profile_phases_profile_id'), 'profile_phases', ['profile_id'], unique=True)


def downgrade() -> None:
    op.drop_index(op.f('ix_profile_phases_profile_id'), table_name='profile_phases')
    op.drop_table('profile_phases')
