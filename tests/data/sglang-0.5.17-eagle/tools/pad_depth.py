"""Pad the stored EAGLE-family curves of this store to num_steps + 1 buckets (run once, 2026-12-01).

The H200 session ran before dynocell passed the config's depth to the acceptance math
(`Speculative.accept_depth`): a class whose requests never accepted all num_steps drafts was
stored with a shorter histogram, so D (and the zero p_D) came from the data — e.g. the EAGLE
tree's prose class as D 2. Zero buckets are exactly what the fixed code appends
(`curve_from_meta_infos(..., num_drafts=num_steps)`), so this recomputes those curves from
their stored histograms with the same `Curve.from_histogram` and rewrites num_drafts,
accept_rate and the per-position points; τ and the histogram's counts are unchanged.

usage: python tools/pad_depth.py STORE.db   (prints each curve it changes)
"""

from __future__ import annotations

import json
import sqlite3
import sys

from dynocell.engine.acceptance import Curve

EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")


def main(db: str) -> None:
    con = sqlite3.connect(db)
    rows = con.execute(
        "select k.id, k.run_id, k.text_class, k.histogram, k.tau, json_extract(c.canonical_json, '$.speculative') "
        "from acceptance_curves k join runs r on r.id = k.run_id join configs c on c.config_hash = r.config_hash"
    ).fetchall()
    for cid, run_id, cls, hist, tau, spec in rows:
        spec = json.loads(spec or "{}")
        steps, h = spec.get("num_steps"), json.loads(hist)
        if spec.get("algorithm") not in EAGLE_FAMILY or not steps or not h or len(h) >= steps + 1:
            continue
        padded = h + [0] * (steps + 1 - len(h))
        cv = Curve.from_histogram(padded)
        assert abs(cv.tau - tau) < 1e-9, (cid, cv.tau, tau)
        con.execute("update acceptance_curves set num_drafts = ?, accept_rate = ?, histogram = ? where id = ?",
                    (cv.num_drafts, cv.accept_rate, json.dumps(padded), cid))
        con.execute("delete from acceptance_points where curve_id = ?", (cid,))
        con.executemany("insert into acceptance_points (curve_id, position, p_uncond, a_cond) values (?, ?, ?, ?)",
                        [(cid, i + 1, cv.p[i], cv.a[i]) for i in range(len(cv.p))])
        print(f"run {run_id} {cls}: {h} -> {padded} (D {len(h) - 1} -> {cv.num_drafts})")
    con.commit()


if __name__ == "__main__":
    main(sys.argv[1])
