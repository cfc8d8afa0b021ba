"""Command-line flags generated from the configuration dataclasses, parsed by tyro.

``rubricgym train`` and ``rubricgym arena`` each describe their options as one dataclass
(:class:`trainers.config.TrainConfig`, parsed by :func:`trainers.train_cli.parse_train_args`;
:class:`trainers.arena.command.ArenaCommand`, which nests :class:`trainers.arena.config.ArenaConfig`):
field types (``Literal`` choices, ``int | None``, lists), defaults and help text live there
once, and every flag is generated from them by `tyro <https://brentyi.github.io/tyro/>`_.
typer stays the root of the command line; it hands a command's raw arguments to
:func:`parse`.

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Options:
    ...     seeds: int = 3
    ...     params: YamlDict = None
    >>> parse(Options, Options(params={}), ["--seeds", "5", "--params", "{gamma: 0.5}"], prog="demo")
    Options(seeds=5, params={'gamma': 0.5})
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, TypeVar

import tyro
from tyro.constructors import PrimitiveConstructorSpec

__all__ = ["YamlDict", "parse"]

T = TypeVar("T")


def _dict_from_text(args: list[str]) -> dict[str, Any]:
    import yaml

    try:
        value = yaml.safe_load(args[0]) if args[0].strip() else {}
    except yaml.YAMLError as exc:
        raise ValueError(f"not a YAML mapping: {args[0]!r} ({exc.__class__.__name__})") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"expected a mapping such as '{{gamma: 0.1}}', got {args[0]!r}")
    return value


#: A ``dict`` field given on the command line as one YAML (or JSON) flow mapping,
#: e.g. ``--estimator-params '{gamma: 0.1, step_weight: 1}'``.
YamlDict = Annotated[
    dict,
    PrimitiveConstructorSpec(
        nargs=1,
        metavar="YAML",
        instance_from_str=_dict_from_text,
        is_instance=lambda value: isinstance(value, dict),
        str_from_instance=lambda value: [json.dumps(value, sort_keys=True)],
    ),
]


def parse(cls: type[T], default: T, args: Sequence[str], *, prog: str, description: str | None = None) -> T:
    """Parse ``args`` into an instance of the dataclass ``cls`` starting from ``default``.

    ``--help`` prints every field with its type, default and help text and exits 0; a bad
    flag or value prints tyro's message naming it and exits 2 (``SystemExit``), as a
    command line should.  Validation in the dataclass's ``__post_init__`` raises as usual.
    An optional field (``int | None``) takes a value or keeps its default: the help shows
    ``--workers INT``, not tyro's ``--workers {None}|INT``.
    """
    return tyro.cli(cls, default=default, args=list(args), prog=prog, description=description,
                    config=(tyro.conf.DisallowNone,))
