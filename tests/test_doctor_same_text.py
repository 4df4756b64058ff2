"""The doctor's engine_vs_oracle on identical generated text (issue 24, the H200 EAGLE tree): greedy curves
of an engine and the reference engine are compared on the requests whose generated text is the same on both
sides. A request whose greedy text differs (a near-tie of the target's top two tokens resolved differently in
fp16 and fp32) follows another trajectory, and its acceptance is another text's: it is left out and named,
not reported as an engine bug. The records are made by the acceptance step's own
``engine.request_acceptance.request_record``; curves through ``doctor.inputs_from_dict``."""

from __future__ import annotations

from dynocell.engine.acceptance import curve_from_meta_infos
from dynocell.engine.request_acceptance import match_by_text, request_record
from dynocell.runbooks.doctor import diagnose_inputs, inputs_from_dict

PROMPTS = [f"prompt number {i}: continue the repetition" for i in range(4)]


def _req(i: int, text: str, hist: list[int], prompt: str | None = None) -> dict:
    meta = {"spec_correct_drafts_histogram": hist, "spec_verify_ct": sum(hist),
            "spec_num_proposed_drafts": 3 * sum(hist), "completion_tokens": 64}
    return request_record(i, PROMPTS[i] if prompt is None else prompt, text, meta)


def _curve(reqs: list[dict], cls: str = "repetition") -> dict:
    c = curve_from_meta_infos(reqs, num_drafts=3)
    return {"text_class": cls, "histogram": list(c.histogram), "requests": reqs}


SAME = [_req(i, f"output {i}", [4, 6, 8, 2]) for i in range(3)]


def _inputs(engine: list[dict], reference: list[dict]) -> dict:
    return {"sampling": "greedy", "curves": [_curve(engine)], "oracle": [{**_curve(reference), "mode": "greedy"}]}


def _oracle_findings(d: dict) -> list:
    return [f for f in diagnose_inputs(inputs_from_dict(d)) if f.rule == "engine_vs_oracle"]


def test_one_request_on_another_text_is_named_not_an_error():
    # Request 3 went down another greedy trajectory on the engine: whole curves differ by more than the
    # 0.02 tolerance, the three requests with identical text agree exactly.
    engine = SAME + [_req(3, "engine took the other tied token", [20, 0, 0, 0])]
    ref = SAME + [_req(3, "reference took this one", [2, 2, 2, 14])]
    whole = {"sampling": "greedy", "curves": [{"text_class": "repetition",
                                                "histogram": _curve(engine)["histogram"]}],
             "oracle": [{"text_class": "repetition", "mode": "greedy", "histogram": _curve(ref)["histogram"]}]}
    assert [f.severity for f in _oracle_findings(whole)] == ["error"]  # without the records: an error
    (f,) = _oracle_findings(_inputs(engine, ref))
    assert f.severity == "info"
    assert "1 of 4 requests generated different greedy text" in f.message and "curves agree" in f.message
    assert f.evidence["same_text"] == 3 and f.evidence["differing_text"] == 1
    assert f.evidence["tau_engine"] == f.evidence["tau_reference"]


def test_curves_that_differ_on_identical_text_are_still_an_error():
    engine = [_req(i, f"output {i}", [10, 6, 3, 1]) for i in range(3)] + [_req(3, "engine text", [5, 5, 5, 5])]
    ref = SAME + [_req(3, "reference text", [5, 5, 5, 5])]
    (f,) = _oracle_findings(_inputs(engine, ref))
    assert f.severity == "error"
    assert "on the 3 of 4 requests with identical text" in f.message


def test_identical_text_everywhere_compares_the_whole_curves():
    engine = [_req(i, f"output {i}", [10, 6, 3, 1]) for i in range(3)]
    (f,) = _oracle_findings(_inputs(engine, SAME))
    assert f.severity == "error" and "identical text" not in f.message
    assert _oracle_findings(_inputs(SAME, SAME)) == []


def test_a_class_with_no_request_on_the_same_text_is_not_compared():
    # Across the run 2 of 6 requests differ (near-ties); in one class both of its requests do.
    e = {"sampling": "greedy", "curves": [
        _curve([_req(0, "a", [20, 0, 0, 0]), _req(1, "b", [20, 0, 0, 0])], "code"),
        _curve([_req(2, "c", [4, 6, 8, 2]), _req(3, "d", [4, 6, 8, 2]), _req(0, "e", [4, 6, 8, 2], "p"),
                _req(1, "f", [4, 6, 8, 2], "q")], "prose")]}
    e["oracle"] = [{**_curve([_req(0, "A", [4, 6, 8, 2]), _req(1, "B", [4, 6, 8, 2])], "code"), "mode": "greedy"},
                   {**_curve([_req(2, "c", [4, 6, 8, 2]), _req(3, "d", [4, 6, 8, 2]), _req(0, "e", [4, 6, 8, 2], "p"),
                              _req(1, "f", [4, 6, 8, 2], "q")], "prose"), "mode": "greedy"}]
    (f,) = _oracle_findings(e)
    assert f.severity == "info" and f.message.startswith("code:") and "no request is left to compare on" in f.message


def test_sampled_runs_compare_whole_curves_whatever_the_text():
    engine = [_req(i, f"engine {i}", [4, 6, 8, 2]) for i in range(3)]
    d = _inputs(engine, SAME)
    d["sampling"], d["oracle"][0]["mode"] = "sampled", "top1"
    assert _oracle_findings(d) == []  # same histograms, different text: sampled text always differs


def test_match_pairs_by_prompt_in_order_and_counts_the_unpaired():
    a = [_req(0, "x", [1, 0, 0, 0]), _req(1, "y", [1, 0, 0, 0], prompt=PROMPTS[0]), _req(2, "z", [1, 0, 0, 0])]
    b = [_req(0, "x", [1, 0, 0, 0]), _req(5, "other", [1, 0, 0, 0], prompt=PROMPTS[0]),
         _req(3, "w", [1, 0, 0, 0])]
    m = match_by_text(a, b)
    assert (m.paired, m.same, m.differing, m.unpaired) == (2, 1, 1, 2)
    assert [r["index"] for r in m.engine_same] == [0] and [r["index"] for r in m.reference_same] == [0]


def test_record_keeps_identity_and_counters_only():
    r = request_record(7, "héllo", "wörld", {"spec_correct_drafts_histogram": (1, 2), "spec_verify_ct": 3,
                                           "spec_num_proposed_drafts": 3, "output_ids": [1, 2, 3], "text": "x"})
    assert set(r) == {"index", "prompt_sha256", "output_sha256", "output_chars", "spec_correct_drafts_histogram",
                      "spec_verify_ct", "spec_num_proposed_drafts"}
    assert r["output_chars"] == 5 and r["spec_correct_drafts_histogram"] == [1, 2]
    assert r["prompt_sha256"] != r["output_sha256"] and len(r["prompt_sha256"]) == 64


def test_most_requests_on_another_text_is_not_explained_away():
    # A garbling engine: every request's greedy text differs from the reference. Near-ties explain a few, not
    # all: the whole curves are compared (an error) and the share is said.
    engine = [_req(i, f"garbled {i}", [20, 0, 0, 0]) for i in range(3)]
    (f,) = _oracle_findings(_inputs(engine, SAME))
    assert f.severity == "error"
    assert "3 of 3 requests generated different greedy text than the reference" in f.message
    assert "more than near-ties" in f.message
