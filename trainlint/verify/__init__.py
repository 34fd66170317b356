"""The runtime verifier: runs small torch experiments that confirm or refute static findings.

Needs the `verify` extra (torch). Nothing here is imported by the linter; torch is imported only in
the child processes that run the probes (`trainlint/verify/probes.py`).
"""
