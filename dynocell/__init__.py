"""dynocell — an engine test cell for LLM serving.

Boot a (patched) SGLang engine with one configuration, prove it healthy,
benchmark it, measure speculative-decoding acceptance per draft position,
profile where the GPU time goes, and keep every result in one SQLite store.
"""

__version__ = "0.1.0"
