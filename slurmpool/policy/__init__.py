"""The pool policy (format v1): schema, validation and the typed result.

>>> from slurmpool.policy.loader import load_policy
>>> policy = load_policy("examples/sandbox.yaml", variables={"root": "/tmp/sbx"})
"""
