"""The embedded reference engine: SGLang's HTTP surface with real speculative decoding on a small local model.

- :mod:`.models` — the made-locally, deterministic model pair (``ensure_pair``, ``make_pair``).
- :mod:`.decoding` — plain / greedy-speculative / speculative-sampling steps with KV-cache rollback.
- :mod:`.server` — the worker, counters, metrics and profiler; :mod:`.api` — FastAPI routes and ``main``.
- Run it: ``python -m dynocell.engine.reference --model-path DIR [--speculative-algorithm STANDALONE …]``.

Importing this package imports no torch; the submodules do.
"""
