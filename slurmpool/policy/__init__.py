"""The pool policy (format v1): schema, validation and the typed result.

>>> from slurmpool.policy import load_policy
>>> policy = load_policy("examples/sandbox.yaml", variables={"root": "/tmp/sbx"})
"""

from slurmpool.policy.errors import Issue, PolicyError
from slurmpool.policy.loader import load_policy, parse_policy
from slurmpool.policy.model import (
    GpuMode,
    GpuSpec,
    HookLimits,
    NodeGroup,
    Partition,
    Paths,
    Policy,
    VgpuUnit,
)
from slurmpool.policy.schema import json_schema

__all__ = [
    "GpuMode",
    "GpuSpec",
    "HookLimits",
    "Issue",
    "NodeGroup",
    "Partition",
    "Paths",
    "Policy",
    "PolicyError",
    "VgpuUnit",
    "json_schema",
    "load_policy",
    "parse_policy",
]
