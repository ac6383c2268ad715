"""Shared fixtures for the unit tests."""

from __future__ import annotations

import pytest

from slurmpool.catalogue import Catalogue, default_catalogue


@pytest.fixture(scope="session")
def catalogue() -> Catalogue:
    return default_catalogue()
