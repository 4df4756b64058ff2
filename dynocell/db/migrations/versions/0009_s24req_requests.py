"""acceptance_curves.requests: each request's acceptance evidence beside its class curve (issue 24)

A nullable JSON column: one ``{index, prompt_sha256, output_sha256, output_chars,
spec_correct_drafts_histogram, spec_num_proposed_drafts, spec_verify_ct}`` per request of the class,
so the doctor can compare an engine's greedy curve with the reference engine's on the requests whose
generated text is identical (a near-tie resolved differently in fp16 and fp32 sends one request down
another trajectory, and its acceptance with it). Curves stored before it keep NULL (compared whole,
as before).

Revision ID: 0009_s24req_requests
Revises: 0008_s24phase_phases
Create Date: 2026-12-01 19:10:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0009_s24req_requests'
down_revision = '0008_s24phase_phases'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('acceptance_curves') as batch:
        batch.add_column(sa.Column('requests', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('acceptance_curves') as batch:
        batch.drop_column('requests')
