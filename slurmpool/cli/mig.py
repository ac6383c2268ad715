"""``slurmpool mig check|plan``: does a set of MIG profiles fit one GPU, and where."""

from __future__ import annotations

import click

from slurmpool.catalogue import CatalogueError, GpuModel, UnknownProfileError, default_catalogue
from slurmpool.cli.common import EXIT_FAIL, echo_json, json_option, usage_error
from slurmpool.placement import PlacementEngine, engine_for

model_option = click.option(
    "--model", "-m", required=True, help="GPU model: catalogue name or NVML name."
)
profiles_argument = click.argument("profiles", nargs=-1, required=True)


def _engine(model_name: str, profiles: tuple[str, ...]) -> tuple[GpuModel, PlacementEngine]:
    try:
        model = default_catalogue().get(model_name)
        if model.mig is None:
            mig_models = [m.name for m in default_catalogue() if m.mig]
            usage_error(f"{model.name} does not support MIG; MIG models: {', '.join(mig_models)}")
        eng = engine_for(model)
        for p in profiles:
            eng.profile(p)
    except UnknownProfileError as e:
        usage_error(str(e))
    except CatalogueError as e:
        usage_error(str(e))
    return model, eng


@click.group()
def mig() -> None:
    """MIG layout questions answered by the placement engine (no GPU needed)."""


@mig.command()
@model_option
@profiles_argument
def check(model: str, profiles: tuple[str, ...]) -> None:
    """Exit 0 if PROFILES fit together on one empty GPU of MODEL, 1 if not.

    Example: ``slurmpool mig check --model A100-SXM4-80GB 4g.40gb 3g.40gb``
    """
    gpu, eng = _engine(model, profiles)
    names = [eng.profile(p).name for p in profiles]
    if eng.plan(names) is None:
        click.echo(f"does not fit on {gpu.name}: {' + '.join(names)}: {eng.explain_misfit(names)}")
        raise SystemExit(EXIT_FAIL)
    click.echo(f"fits on {gpu.name}: {' + '.join(names)}")


@mig.command()
@model_option
@profiles_argument
@json_option("the plan")
def plan(model: str, profiles: tuple[str, ...], as_json: bool) -> None:
    """Print the placement (start, size in memory slices) of each profile.

    Example: ``slurmpool mig plan --model A100-SXM4-80GB 3g 2g 1g 1g``
    """
    gpu, eng = _engine(model, profiles)
    names = [eng.profile(p).name for p in profiles]
    placements = eng.plan(names)
    if placements is None:
        msg = f"does not fit on {gpu.name}: {' + '.join(names)}: {eng.explain_misfit(names)}"
        if as_json:
            echo_json({"model": gpu.name, "fits": False, "reason": msg})
        else:
            click.echo(msg)
        raise SystemExit(EXIT_FAIL)
    if as_json:
        echo_json(
            {
                "model": gpu.name,
                "fits": True,
                "instances": [
                    {"profile": n, "start": pl.start, "size": pl.size}
                    for n, pl in zip(names, placements, strict=True)
                ],
            }
        )
        return
    width = eng.memory_slices
    click.echo(f"{gpu.name}: memory slices 0..{width - 1}")
    for n, pl in zip(names, placements, strict=True):
        bar = "".join("#" if pl.start <= i < pl.start + pl.size else "." for i in range(width))
        click.echo(f"  {n:<12} start={pl.start} size={pl.size}  [{bar}]")
