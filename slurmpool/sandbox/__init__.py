"""A real Slurm cluster on this machine (loopback only) for the README and integration tests."""

from slurmpool.sandbox.cluster import (
    Sandbox,
    SandboxError,
    SandboxOptions,
    SandboxRunning,
    default_policy_path,
)
from slurmpool.sandbox.layout import DEFAULT_SANDBOX_DIR, Layout, SandboxState

__all__ = [
    "DEFAULT_SANDBOX_DIR",
    "Layout",
    "Sandbox",
    "SandboxError",
    "SandboxOptions",
    "SandboxRunning",
    "SandboxState",
    "default_policy_path",
]
