"""Patroni's timing settings for the harness's Patroni topologies (RULEBOOK HAM), set in ONE place:
:data:`DEFAULT_TIMING`. They are written into every node's bootstrap DCS configuration, recorded in
the run (``patroni.json``) and in the history (``ham.settings``), and the HAM checkers compute their
bounds from the recorded values, never from these defaults.

Patroni's documentation: ``ttl`` (default 30, "can't be lower than 20"), ``loop_wait`` (default 10,
at least 1), ``retry_timeout`` (default 10, at least 3), and "``loop_wait + 2*retry_timeout <=
ttl``"; "DCS or network issues shorter than ``retry_timeout`` will not cause Patroni to demote the
leader"."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from harness.errors import ConfigError

#: Patroni's documented minimum of each setting (seconds).
MINIMUMS = {"ttl": 20, "loop_wait": 1, "retry_timeout": 3}


@dataclass(frozen=True)
class PatroniTiming:
    """The three HA-loop settings (seconds) and whether commits wait for a synchronous standby."""

    ttl: int = 20
    loop_wait: int = 2
    retry_timeout: int = 3
    synchronous_mode: bool = True
    #: Patroni's ``primary_stop_timeout`` (dynamic configuration; synchronous_mode only): how long a
    #: demoting primary's PostgreSQL may take to stop before Patroni kills it. Patroni's default 0 waits
    #: forever; a demote was seen hanging past 120 s on a loaded machine (its postmaster still running
    #: after the shutdown checkpoint), so the harness bounds it.
    primary_stop_timeout: int = 10
    #: Patroni's ``synchronous_mode_strict`` (default false): with it, a primary that has no
    #: synchronous standby keeps ``synchronous_standby_names = '*'`` (its commits wait) instead of
    #: acknowledging commits alone - also right after a Patroni restart beside a running primary
    #: (docs/ha-managers.md, "Findings": the orphaned primary).
    synchronous_mode_strict: bool = False

    def __post_init__(self) -> None:
        for key, low in MINIMUMS.items():
            value = getattr(self, key)
            if not isinstance(value, int) or value < low:
                raise ConfigError(f"Patroni's {key} must be an integer of at least {low} s, not {value!r}")
        if self.loop_wait + 2 * self.retry_timeout > self.ttl:
            raise ConfigError(f"Patroni needs loop_wait + 2*retry_timeout <= ttl; {self.loop_wait} + "
                              f"2*{self.retry_timeout} > {self.ttl}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form recorded in the run and in ``ham.settings``."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PatroniTiming:
        """Inverse of :meth:`to_dict` (ConfigError on a bad value)."""
        keys = ("ttl", "loop_wait", "retry_timeout", "synchronous_mode", "primary_stop_timeout",
                "synchronous_mode_strict")
        return cls(**{k: data[k] for k in keys if k in data})


#: The harness's short timings (each at or near Patroni's documented minimum, the sum rule kept:
#: 2 + 2*3 = 8 <= 20), so that a failover takes about 20 s instead of about 30-40 s.
DEFAULT_TIMING = PatroniTiming()
