"""open world: boot kind (started | attached | imported), observed configs, import records

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 09:40:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('boots', schema=None) as batch_op:
        batch_op.add_column(sa.Column('kind', sa.String(length=16), server_default='started', nullable=False))
        batch_op.add_column(sa.Column('source_sha256', sa.String(length=64), nullable=True))
    with op.batch_alter_table('configs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('observed', sa.Boolean(), server_default='0', nullable=False))
    op.create_table('imports',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('files', sa.JSON(), nullable=False),
    sa.Column('config_hash', sa.String(length=80), nullable=True),
    sa.Column('boot_id', sa.String(length=32), nullable=True),
    sa.Column('run_id', sa.String(length=32), nullable=True),
    sa.Column('profile_id', sa.Integer(), nullable=True),
    sa.Column('summary', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['boot_id'], ['boots.id'], name=op.f('fk_imports_boot_id_boots')),
    sa.ForeignKeyConstraint(['config_hash'], ['configs.config_hash'], name=op.f('fk_imports_config_hash_configs')),
    sa.ForeignKeyConstraint(['profile_id'], ['profile_runs.id'], name=op.f('fk_imports_profile_id_profile_runs')),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_imports_run_id_runs')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_imports')),
    sa.UniqueConstraint('kind', 'sha256', name='uq_imports_kind_sha256')
    )


def downgrade() -> None:
    op.drop_table('imports')
    with op.batch_alter_table('configs', schema=None) as batch_op:
        batch_op.drop_column('observed')
    with op.batch_alter_table('boots', schema=None) as batch_op:
        batch_op.drop_column('source_sha256')
        batch_op.drop_column('kind')
