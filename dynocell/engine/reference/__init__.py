"""The embedded reference engine: SGLang's HTTP surface with real speculative decoding on a small local model.

- :mod:`.models` — the made-locally, deterministic model pair (``ensure_pair``, ``make_pair``).
- :mod:`.decoding` — plain / greedy-speculative / speculative-sampling steps with KV-cache rollback.
- :mod:`.eagle`, :mod:`.eagle3`, :mod:`.mtp` — EAGLE / EAGLE-3 heads and an MTP target in SGLang 0.5.17's
  layouts, made locally; :mod:`.eagle_decoding` — EAGLE chain and tree drafting with SGLang's proposal rules.
- :mod:`.server` — the worker, counters, metrics and profiler; :mod:`.api` — FastAPI routes and ``main``.
- Run it: ``python -m dynocell.engine.reference --model-path DIR [--speculative-algorithm STANDALONE …]``.

Importing this package imports no torch; the submodules do.
"""
