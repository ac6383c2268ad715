"""The files a site's ``slurm.conf`` pulls in with ``Include``, in the order Slurm reads them.

Slurm reads an ``Include`` where it stands, as if the file's lines were there; a
relative name is taken in the directory of the file that names it, and ``%c`` is
the ClusterName read so far (parse_config.c, ``_parse_include_directive`` and
``_add_full_path``, 22.05 to 26.05).  So a setting, node or partition of the site
may live in any of those files, and the last line of a key in that order is the
one in force.

Pure: the files' texts come in as a mapping; what to read is :func:`includes_of`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping

from slurmpool.records import record
from slurmpool.slurm.conf import ConfLine, scan_conf, settings


@record(frozen=True, slots=True)
class Include:
    line: int  # 1-based, in the including file
    text: str  # the line as written
    path: str  # the file it names, resolved


def resolve(name: str, including: str, cluster: str | None) -> str:
    """The path Slurm reads for ``Include name`` in file ``including``."""
    if cluster is not None:
        name = name.replace("%c", cluster)
    return name if name.startswith("/") else os.path.join(os.path.dirname(including), name)


def includes_of(
    path: str, text: str, cluster: str | None, skip: Callable[[str], bool] = lambda _: False
) -> list[Include]:
    """The ``Include`` lines of ``text`` (file ``path``), less those of the files
    ``skip`` says (slurmpool's own); ``cluster``: the ClusterName in force."""
    out = []
    for line in scan_conf(text):
        if line.is_key("include") and line.value:
            target = resolve(line.value.split()[0], path, cluster)
            if not skip(target):
                out.append(Include(line.index + 1, line.text, target))
    return out


class MissingInclude(Exception):
    """A file an ``Include`` names is not there."""

    def __init__(self, including: str, include: Include) -> None:
        super().__init__(
            f"{including} line {include.line} ({include.text.strip()!r}) includes "
            f"{include.path}, which is not there"
        )
        self.including = including
        self.include = include


def gather(
    top: str,
    text: str,
    read: Callable[[str], str | None],
    skip: Callable[[str], bool] = lambda _: False,
) -> dict[str, str]:
    """The text of every file ``top`` (whose text is ``text``) includes, near or far
    (path -> text), each read once with ``read`` (None: not there, which raises
    :class:`MissingInclude`); ``skip``: files not to read."""
    cluster = settings(text).get("clustername")
    texts: dict[str, str] = {}
    queue = [(top, text)]
    while queue:
        path, body = queue.pop(0)
        for inc in includes_of(path, body, cluster, skip):
            if inc.path in texts or inc.path == top:
                continue
            found = read(inc.path)
            if found is None:
                raise MissingInclude(path, inc)
            texts[inc.path] = found
            queue.append((inc.path, found))
    return texts


def walk(
    top: str,
    texts: Mapping[str, str],
    skip: Callable[[str], bool] = lambda _: False,
) -> Iterator[tuple[str, ConfLine]]:
    """Every line of ``top`` and the files it includes, as (file, line), in the order
    Slurm reads them; a file not in ``texts``, or already being read, is passed over."""
    cluster: str | None = None

    def lines_of(path: str, seen: tuple[str, ...]) -> Iterator[tuple[str, ConfLine]]:
        nonlocal cluster
        for line in scan_conf(texts[path]):
            if line.is_key("clustername") and line.value:
                cluster = line.value
            if line.is_key("include") and line.value:
                target = resolve(line.value.split()[0], path, cluster)
                if not skip(target) and target in texts and target not in seen:
                    yield from lines_of(target, (*seen, target))
                continue
            yield path, line

    yield from lines_of(top, (top,))
