"""boots: supervisor_create_time and engine_create_time get their own columns (issue 23)

Until 0006 the liveness guards against a recycled pid — the supervisor's and the engine's process
create times (seconds since the epoch, psutil's ``create_time()``) — were kept in
``boots.failure_detail`` even on healthy boots. They move to two nullable Float columns; the data
migration copies existing values and removes the two keys from ``failure_detail`` (an emptied
detail becomes NULL). The downgrade moves them back. Columns are added with plain ALTER TABLE …
ADD COLUMN (in place on SQLite, no table rebuild).

Revision ID: 0007_s23core_liveness
Revises: 0006
Create Date: 2026-12-01 12:40:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0007_s23core_liveness'
down_revision = '0006'
branch_labels = None
depends_on = None

KEYS = ("supervisor_create_time", "engine_create_time")

_boots = sa.table(
    "boots",
    sa.column("id", sa.String),
    sa.column("failure_detail", sa.JSON),
    sa.column("supervisor_create_time", sa.Float),
    sa.column("engine_create_time", sa.Float),
)


def _number(v):  # noqa: ANN001, ANN202 - JSON value
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def upgrade() -> None:
    for key in KEYS:
        op.add_column('boots', sa.Column(key, sa.Float(), nullable=True))
    conn = op.get_bind()
    rows = conn.execute(sa.select(_boots.c.id, _boots.c.failure_detail)).all()
    for boot_id, detail in rows:
        if not isinstance(detail, dict) or not any(k in detail for k in KEYS):
            continue
        rest = {k: v for k, v in detail.items() if k not in KEYS}
        conn.execute(_boots.update().where(_boots.c.id == boot_id).values(
            supervisor_create_time=_number(detail.get("supervisor_create_time")),
            engine_create_time=_number(detail.get("engine_create_time")),
            failure_detail=rest or None))


def downgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(sa.select(_boots.c.id, _boots.c.failure_detail, _boots.c.supervisor_create_time,
                                  _boots.c.engine_create_time)).all()
    for boot_id, detail, sup, eng in rows:
        back = {k: v for k, v in (("supervisor_create_time", sup), ("engine_create_time", eng)) if v is not None}
        if back:
            conn.execute(_boots.update().where(_boots.c.id == boot_id).values(
                failure_detail={**(detail if isinstance(detail, dict) else {}), **back}))
    with op.batch_alter_table('boots', schema=None) as batch_op:
        for key in reversed(KEYS):
            batch_op.drop_column(key)
