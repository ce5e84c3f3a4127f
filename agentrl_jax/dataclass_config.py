"""ConfigDicts built from dataclasses, and dataclasses built back from ConfigDicts.

A component whose settings are a dataclass (`EngineConfig`, `EpisodeLimits`) owns their fields
and defaults; a run's config section for it is made with `config_dict_from`, so each field and
default is written once, in the dataclass, and a config states only what it changes. The way
back is `dataclass_from`, which also undoes what JSON and some ConfigDict round trips do to
tuples (they come back as lists, which a frozen dataclass cannot hash and compares unequal).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import ml_collections

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


def config_dict_from(source: Any, **overrides: Any) -> ml_collections.ConfigDict:
    """The fields of a dataclass (a type, whose defaults are taken, or an instance) as a
    ConfigDict, with `overrides` replacing some of them.

    The overrides go through the dataclass (`dataclasses.replace`), so an unknown field name or
    a value its validation refuses is an error here, where the config is written.
    """
    instance: Any = source() if isinstance(source, type) else source
    if not dataclasses.is_dataclass(instance) or isinstance(instance, type):
        raise TypeError(f"{source!r} is not a dataclass or a dataclass instance")
    instance = dataclasses.replace(instance, **overrides)
    return ml_collections.ConfigDict(
        {f.name: getattr(instance, f.name) for f in dataclasses.fields(instance)})


def dataclass_from(values: ml_collections.ConfigDict | Mapping[str, Any], cls: type[T]) -> T:
    """`cls(**values)`, with list values turned back into tuples.

    `values` may be a ConfigDict (a config section) or a mapping (e.g. parsed JSON); a key that
    is not a field of `cls` is a TypeError naming it. Fields it lacks take their defaults.
    """
    if isinstance(values, ml_collections.ConfigDict):
        values = values.to_dict()
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {', '.join(unknown)}")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def mutable_copy(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """A ConfigDict of `config`'s values that the caller may change, whether `config` is a
    run's frozen config (`experiment.run_config`) or a plain ConfigDict; `config` itself is
    left as it is."""
    if isinstance(config, ml_collections.FrozenConfigDict):
        return config.as_configdict()
    return config.copy_and_resolve_references()
