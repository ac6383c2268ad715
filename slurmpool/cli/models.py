"""``slurmpool models``: list the GPU catalogue."""

from __future__ import annotations

import click

from slurmpool.catalogue import CatalogueError, load_catalogue
from slurmpool.cli.common import echo_json, json_option, usage_error


@click.command()
@json_option("the full catalogue")
@click.option(
    "--catalogue",
    "catalogue_dir",
    type=click.Path(file_okay=False, exists=True),
    help="Use this catalogue directory instead of the shipped one.",
)
def models(as_json: bool, catalogue_dir: str | None) -> None:
    """List the GPU models slurmpool knows, with their MIG profiles.

    Example: ``slurmpool models --json | jq '.[].name'``
    """
    try:
        cat = load_catalogue(catalogue_dir)
    except CatalogueError as e:
        usage_error(str(e))
    if as_json:
        echo_json([m.to_dict() for m in cat])
        return
    click.echo(f"{'MODEL':<16} {'MEMORY':>9}  {'MIG':<4} PROFILES")
    for m in cat:
        profiles = ", ".join(p.name for p in m.mig.gi_profiles) if m.mig else "-"
        mig = f"{m.mig.compute_slices}/{m.mig.memory_slices}" if m.mig else "no"
        click.echo(f"{m.name:<16} {m.memory_mib:>6} MiB  {mig:<4} {profiles}")
