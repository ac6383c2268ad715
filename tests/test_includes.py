"""Which files a slurm.conf pulls in, and in what order Slurm reads their lines (pure)."""

from __future__ import annotations

from slurmpool.slurm.includes import includes_of, resolve, walk


def test_resolve_as_slurm_does() -> None:
    assert resolve("nodes.conf", "/etc/slurm/slurm.conf", None) == "/etc/slurm/nodes.conf"
    assert resolve("/srv/x.conf", "/etc/slurm/slurm.conf", None) == "/srv/x.conf"
    assert resolve("%c/nodes.conf", "/etc/slurm/slurm.conf", "gpu") == "/etc/slurm/gpu/nodes.conf"
    # Relative to the file that names it, not to slurm.conf.
    assert resolve("b.conf", "/etc/slurm/d/a.conf", None) == "/etc/slurm/d/b.conf"


def test_includes_of_lists_each_include_but_slurmpools() -> None:
    text = (
        "Include a.conf\n#Include b.conf\ninclude /x/%c.conf\nInclude /etc/slurm/slurmpool.conf\n"
    )
    got = includes_of("/etc/slurm/slurm.conf", text, "c", lambda p: p.endswith("slurmpool.conf"))
    assert [(i.line, i.path) for i in got] == [(1, "/etc/slurm/a.conf"), (3, "/x/c.conf")]


def test_walk_reads_an_include_where_it_stands() -> None:
    texts = {
        "/e/slurm.conf": "ClusterName=c\nA=1\nInclude %c.conf\nB=2\nInclude /e/missing.conf\n",
        "/e/c.conf": "A=3\nInclude /e/slurm.conf\nInclude d.conf\n",
        "/e/d.conf": "C=4\n",
    }
    got = [(f, line.text) for f, line in walk("/e/slurm.conf", texts) if line.key]
    assert got == [
        ("/e/slurm.conf", "ClusterName=c"),
        ("/e/slurm.conf", "A=1"),
        ("/e/c.conf", "A=3"),  # the include of slurm.conf itself is passed over
        ("/e/d.conf", "C=4"),
        ("/e/slurm.conf", "B=2"),
    ]
