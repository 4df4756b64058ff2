"""Each request's acceptance evidence, and the pairing of two engines' requests by generated text.

Why: a greedy curve of the same target/draft pair on the same prompts must agree between an engine and
the reference engine (the doctor's ``engine_vs_oracle``), but only while both generate the same tokens.
Where the target's top two logits are tied to within rounding, fp16 on the GPU and fp32 on the CPU can
pick different tokens; from there the request follows another trajectory and its acceptance is that of
another text (issue 24: on the H200, EAGLE tree drafting on the r2 pair, two of five classes). Pairing the
requests by prompt and comparing the curves on the requests whose generated text is identical keeps the
comparison exact where it is meaningful and says how many requests it left out.

A request record (stored in ``acceptance_curves.requests``, migration 0009) is a JSON object::

    {"index": 3, "prompt_sha256": "<64 hex>", "output_sha256": "<64 hex>", "output_chars": 211,
     "spec_correct_drafts_histogram": [h0, h1, ...], "spec_num_proposed_drafts": 93, "spec_verify_ct": 31}

The histogram and counters are SGLang's ``meta_info`` fields (``scheduler.py`` / ``schedule_batch.py``
in 0.5.17; the reference engine emits the same), so a subset of records is summed into a curve with
:func:`dynocell.engine.acceptance.curve_from_meta_infos`. Hashes are sha256 of the UTF-8 text: the
store keeps no prompt or output text for this, only their identity.

Pure functions: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dynocell.engine.builds import sha256_bytes

#: The ``meta_info`` fields a record keeps (the ones :func:`curve_from_meta_infos` reads).
META_KEYS = ("spec_correct_drafts_histogram", "spec_accept_histogram", "spec_num_proposed_drafts", "spec_verify_ct")


def _sha(text: str) -> str:
    return sha256_bytes(text.encode("utf-8", "surrogatepass"))


def request_record(index: int, prompt: str, output_text: str, meta: Mapping[str, Any]) -> dict[str, Any]:
    """One request's record: its index in the level, the sha256 (hex) of its prompt and of its generated
    text, the text's length in characters, and the :data:`META_KEYS` present in ``meta`` (SGLang
    ``meta_info``). Lists are copied; other meta fields are dropped."""
    rec: dict[str, Any] = {"index": int(index), "prompt_sha256": _sha(prompt), "output_sha256": _sha(output_text),
                           "output_chars": len(output_text)}
    for k in META_KEYS:
        v = meta.get(k)
        if v is not None:
            rec[k] = list(v) if isinstance(v, (list, tuple)) else v
    return rec


@dataclass(frozen=True)
class TextMatch:
    """Two runs' requests of one class paired by prompt (``prompt_sha256``, in order among equal prompts).

    ``paired``: requests present in both; ``same``: how many of those generated identical text;
    ``engine_same`` / ``reference_same``: those records, in pairing order (to sum into curves);
    ``unpaired``: requests of either side with no partner (a different workload or a failed request).
    """

    paired: int
    same: int
    engine_same: tuple[Mapping[str, Any], ...]
    reference_same: tuple[Mapping[str, Any], ...]
    unpaired: int

    @property
    def differing(self) -> int:
        """Paired requests whose generated text differs."""
        return self.paired - self.same


def match_by_text(engine: Sequence[Mapping[str, Any]], reference: Sequence[Mapping[str, Any]]) -> TextMatch:
    """Pair ``engine`` and ``reference`` request records by prompt and keep those with identical output.

    Records without ``prompt_sha256`` / ``output_sha256`` are unpaired. Equal prompts pair in order of
    appearance (a workload may repeat a prompt)."""
    queue: dict[str, list[Mapping[str, Any]]] = {}
    for r in reference:
        if r.get("prompt_sha256") and r.get("output_sha256"):
            queue.setdefault(str(r["prompt_sha256"]), []).append(r)
    paired, e_same, r_same, unpaired = 0, [], [], 0
    for e in engine:
        partners = queue.get(str(e.get("prompt_sha256") or ""), [])
        if not e.get("output_sha256") or not partners:
            unpaired += 1
            continue
        r = partners.pop(0)
        paired += 1
        if e["output_sha256"] == r["output_sha256"]:
            e_same.append(e)
            r_same.append(r)
    unpaired += sum(len(v) for v in queue.values())
    return TextMatch(paired, len(e_same), tuple(e_same), tuple(r_same), unpaired)
