"""web_tokens.expires_at: a web-panel login token may expire (issue 32, item 17)

A nullable timestamp (UTC): NULL for a token without an expiry (every token made before this revision);
a token past it no longer logs in and its sessions end at their next request, as a revoked one.

Revision ID: 0010_s32trust_token_expiry
Revises: 0009_s24req_requests
Create Date: 2026-12-02 08:10:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0010_s32trust_token_expiry'
down_revision = '0009_s24req_requests'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('web_tokens') as batch:
        batch.add_column(sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('web_tokens') as batch:
        batch.drop_column('expires_at')
