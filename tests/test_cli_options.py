"""Options shared by several commands are one option: same name, help and resolution."""

from __future__ import annotations

import click
import pytest

from slurmpool.cli import main

NODE_COMMANDS = [
    ("status",),
    ("doctor",),
    ("monitord",),
    ("accounting", "status"),
    ("accounting", "flush"),
]


def _command(path: tuple[str, ...]) -> click.Command:
    cmd: click.Command = main
    for name in path:
        assert isinstance(cmd, click.Group)
        found = cmd.get_command(click.Context(cmd), name)
        assert found is not None, name
        cmd = found
    return cmd


def _param(cmd: click.Command, name: str) -> click.Parameter:
    return next(p for p in cmd.params if p.name == name)


@pytest.mark.parametrize("path", NODE_COMMANDS, ids=" ".join)
def test_every_node_command_resolves_node_the_same_way(
    path: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    cmd = _command(path)
    node = _param(cmd, "node")
    assert isinstance(node, click.Option)
    assert node.opts == ["--node"]
    assert node.help == "This node's Slurm name [$SLURMD_NODENAME or hostname]."
    ctx = click.Context(cmd)
    monkeypatch.setenv("SLURMD_NODENAME", "gpu07")
    assert node.process_value(ctx, None) == "gpu07"
    assert node.process_value(ctx, "gpu01") == "gpu01"
    monkeypatch.delenv("SLURMD_NODENAME")
    resolved = node.process_value(ctx, None)
    assert resolved and "." not in resolved  # the short host name


@pytest.mark.parametrize("path", [p for p in NODE_COMMANDS if p != ("doctor",)], ids=" ".join)
def test_node_config_option_is_shared(path: tuple[str, ...]) -> None:
    """doctor's --node-config differs on purpose: by default it comes from --policy."""
    option = _param(_command(path), "node_config")
    assert isinstance(option, click.Option)
    assert option.envvar == "SLURMPOOL_NODE_CONFIG"
    assert str(option.default) == "/etc/slurm/node-config.json"
