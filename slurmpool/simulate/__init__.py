"""Replaying a site's GPU jobs under each pooling policy: ``slurmpool simulate``."""
