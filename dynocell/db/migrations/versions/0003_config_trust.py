"""config_trust: operators' marks that a code-injecting config may be booted from the web

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 09:45:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('config_trust',
    sa.Column('config_hash', sa.String(length=80), nullable=False),
    sa.Column('trusted_by', sa.String(length=200), nullable=False),
    sa.Column('trusted_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['config_hash'], ['configs.config_hash'], name=op.f('fk_config_trust_config_hash_configs')),
    sa.PrimaryKeyConstraint('config_hash', name=op.f('pk_config_trust'))
    )


def downgrade() -> None:
    op.drop_table('config_trust')
