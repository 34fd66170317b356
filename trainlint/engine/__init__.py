"""The engine: discovery, input kinds (Python, notebooks, JSON configs), the pre-check, contained
worker processes, the cache, and the per-file pipeline that runs the rules."""
