"""slurmpool.records behaves as dataclasses.dataclass for the options slurmpool uses."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from slurmpool import records

# The runtime implementation (type checkers see dataclasses under these names).
RECORD = records._record
FIELD = records._field
IMPLS = [
    pytest.param((dataclasses.dataclass, dataclasses.field), id="dataclasses"),
    pytest.param((RECORD, FIELD), id="records"),
]


def make(impl, **options):
    deco, field = impl

    @deco(**options)
    class Point:
        """A point."""

        x: int
        y: int = 2
        tags: tuple[str, ...] = field(default_factory=tuple)
        note: str = field(default="", repr=False, compare=False)

    return Point


# Module level so pickle can find them by name.
@RECORD(frozen=True, slots=True)
class FrozenSlots:
    a: int
    b: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class FrozenSlotsDC:
    a: int
    b: tuple[int, ...] = ()


OPTIONS = [
    {},
    {"frozen": True},
    {"slots": True},
    {"frozen": True, "slots": True},
    {"frozen": True, "slots": True, "order": True},
    {"eq": False},
]


def observe(impl, options):
    """Everything a caller can see of a record class, as plain data."""
    cls = make(impl, **options)
    p, q = cls(1), cls(1, 2, ("a",), note="n")
    seen = {
        "repr": repr(p).split(".")[-1],
        "values": (p.x, p.y, p.tags, p.note, q.tags, q.note),
        "factory": cls(1).tags == (),
        "eq_ignores_note": cls(1, note="a") == cls(1, note="b"),
        "eq_other_type": p == (1, 2),
        "hashable": cls.__hash__ is not None,
        "has_dict": hasattr(p, "__dict__"),
        "match_args": cls.__match_args__,
        "fields": [
            f.name for f in (dataclasses.fields if impl[0] is not RECORD else records._fields)(cls)
        ],
        "asdict": (dataclasses.asdict if impl[0] is not RECORD else records._asdict)(q),
    }
    if options.get("frozen"):
        with pytest.raises(AttributeError, match="cannot assign to field 'x'"):
            p.x = 5
        with pytest.raises(AttributeError):
            del p.x
        seen["hash_equal"] = hash(cls(1, 3)) == hash(cls(1, 3, note="other"))
    else:
        p.x = 5
        seen["assigned"] = p.x
    if options.get("order"):
        seen["order"] = (cls(1) < cls(2), cls(1, 3) > cls(1, 2), cls(1) <= cls(1))
        with pytest.raises(TypeError):
            _ = cls(1) < 1
    replace = dataclasses.replace if impl[0] is not RECORD else records._replace
    seen["replace"] = repr(replace(cls(1, 2), y=7)).split(".")[-1]
    return seen


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "plain")
def test_records_match_dataclasses(options):
    dc, rec = (observe(p.values[0], options) for p in IMPLS)
    assert rec == dc


@pytest.mark.parametrize("impl", IMPLS)
def test_declaration_errors_match(impl):
    deco, field = impl
    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):

        @deco
        class Bad:
            a: int = 1
            b: int

    with pytest.raises(ValueError, match="mutable default"):

        @deco
        class Mutable:
            a: list[int] = []  # noqa: RUF012

    with pytest.raises(ValueError, match="cannot specify both default and default_factory"):
        field(default=1, default_factory=list)


@pytest.mark.parametrize("impl", IMPLS)
def test_own_methods_and_init_false_are_kept(impl):
    deco, field = impl

    @deco(frozen=True, slots=True)
    class Thing:
        a: int
        cache: dict[str, int] = field(default_factory=dict, init=False, repr=False)

        def __repr__(self) -> str:
            return "custom"

        @property
        def double(self) -> int:
            return self.a * 2

    t, u = Thing(4), Thing(5)
    assert repr(t) == "custom" and t.double == 8 and t.cache == {}
    assert t.cache is not u.cache
    with pytest.raises(TypeError):
        Thing(1, {})  # type: ignore[call-arg]


@pytest.mark.parametrize("cls", [FrozenSlots, FrozenSlotsDC])
def test_frozen_slots_copy_and_pickle(cls):
    v = cls(1, (2, 3))
    assert copy.copy(v) == v and copy.deepcopy(v) == v
    assert pickle.loads(pickle.dumps(v)) == v
    assert {v, cls(1, (2, 3))} == {v}


def test_importing_records_does_not_import_dataclasses():
    code = (
        "import sys, slurmpool.records as r\n"
        "@r.record(frozen=True, slots=True)\n"
        "class A:\n    x: int\n"
        "assert A(1) == A(1)\n"
        "print(sorted(m for m in ('dataclasses', 'inspect', 'typing') if m in sys.modules))\n"
    )
    root = str(Path(records.__file__).parents[1])
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {root!r})\n" + code],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_methods_are_compiled_on_first_use_and_then_live_on_the_class():
    @records.record(frozen=True, order=True)
    class Base:
        a: int

    @records.record(frozen=True, order=True)
    class Child(Base):
        b: int = 0

    class Plain(Base):  # not a record: inherits Base's methods
        pass

    stub = Base.__dict__["__init__"]
    # Child and Plain first, so Base's stubs are still in place when Plain uses them.
    assert Child(1, 2) == Child(1, 2) and Child(1, 2) < Child(1, 3)
    assert Plain(5).a == 5 and Plain(5) != Base(5)  # __eq__ needs the same class
    assert Base.__dict__["__init__"] is not stub  # compiled and put on Base
    assert Base.__init__.__qualname__.endswith("Base.__init__")
    assert Base(1) < Base(2) and hash(Base(1)) == hash(Base(1))
    assert repr(Child(1, 2)).endswith("Child(a=1, b=2)")
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'a'"):
        Base()  # type: ignore[call-arg]


def test_a_record_from_a_module_without_the_future_import():
    # Python 3.14 (PEP 649) evaluates such a class's annotations lazily: its __dict__
    # has no __annotations__, and the record must still see every field.
    ns: dict = {}
    exec(
        "from slurmpool.records import record, field\n"
        "@record\n"
        "class Job:\n"
        "    job_id: int\n"
        "    name: 'str' = 'x'\n"
        "    tags: list = field(default_factory=list)\n",
        ns,
    )
    job = ns["Job"](7)
    assert (job.job_id, job.name, job.tags) == (7, "x", [])
    assert repr(job) == "Job(job_id=7, name='x', tags=[])"
