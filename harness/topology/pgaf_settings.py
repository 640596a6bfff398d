"""pg_auto_failover's timing settings for the harness's pg_auto_failover topologies (RULEBOOK HAM), set
in ONE place: :data:`DEFAULT_SETTINGS`. The monitor's are ``ALTER SYSTEM`` settings of its
``pgautofailover`` extension (milliseconds; pg_autoctl(5), "Configuration"), the keeper's one is
``timeout.network_partition_timeout`` of every data node's ``pg_autoctl.cfg`` (seconds, ``pg_autoctl
config set``). They are recorded in the run (``pgaf.json``) and in the history (``ham.settings``,
``manager: pg_auto_failover``); the HAM checkers compute their bounds from the recorded values.

What the documentation says they do (pg_autoctl(5), "Configuration"): the monitor decides to fail
over when its health checks find the primary unhealthy - ``health_check_period``,
``health_check_timeout``, ``health_check_max_retries``, ``health_check_retry_delay`` and
``node_considered_unhealthy_timeout`` decide when; at promotion it waits ``primary_demote_timeout``
so that pending writes on the former primary reach the secondary; a primary's keeper that can reach
neither the monitor nor a standby demotes it after ``network_partition_timeout``. A new primary
must not take writes before a partitioned former one has demoted itself, so the harness keeps
``network_partition_timeout`` shorter than ``primary_demote_timeout`` (as the defaults, 20 s and 30 s)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from harness.errors import ConfigError

#: pg_auto_failover's defaults (monitor: ms; keeper: s), for the docs and the checks below.
DEFAULTS = {"health_check_period_ms": 5000, "health_check_timeout_ms": 5000, "health_check_max_retries": 2,
            "health_check_retry_delay_ms": 2000, "node_considered_unhealthy_timeout_ms": 20000,
            "startup_grace_period_ms": 10000, "primary_demote_timeout_ms": 30000, "network_partition_timeout_s": 20}
#: The monitor's GUC of each monitor setting.
MONITOR_GUCS = {"health_check_period_ms": "pgautofailover.health_check_period",
                "health_check_timeout_ms": "pgautofailover.health_check_timeout",
                "health_check_max_retries": "pgautofailover.health_check_max_retries",
                "health_check_retry_delay_ms": "pgautofailover.health_check_retry_delay",
                "node_considered_unhealthy_timeout_ms": "pgautofailover.node_considered_unhealthy_timeout",
                "startup_grace_period_ms": "pgautofailover.startup_grace_period",
                "primary_demote_timeout_ms": "pgautofailover.primary_demote_timeout"}


@dataclass(frozen=True)
class PgafSettings:
    """The monitor's failure-detection and promotion settings and the keepers' partition timeout."""

    health_check_period_ms: int = 1000
    health_check_timeout_ms: int = 2000  # 1000 ms marked healthy secondaries unhealthy at load 20
    health_check_max_retries: int = 1
    health_check_retry_delay_ms: int = 500
    node_considered_unhealthy_timeout_ms: int = 4000
    startup_grace_period_ms: int = 4000
    primary_demote_timeout_ms: int = 8000
    network_partition_timeout_s: int = 5

    def __post_init__(self) -> None:
        for key in DEFAULTS:
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"pg_auto_failover's {key} must be a positive integer, not {value!r}")
        if self.health_check_max_retries > 100:  # the extension's own maximum
            raise ConfigError(f"pg_auto_failover's health_check_max_retries is at most 100, not "
                              f"{self.health_check_max_retries}")
        if self.network_partition_timeout_s * 1000 >= self.primary_demote_timeout_ms:
            raise ConfigError(f"network_partition_timeout ({self.network_partition_timeout_s} s) must be shorter "
                              f"than primary_demote_timeout ({self.primary_demote_timeout_ms} ms): a partitioned "
                              "primary demotes itself before the monitor lets a new one take writes")

    def monitor_gucs(self) -> dict[str, int]:
        """The monitor's ``ALTER SYSTEM`` settings: GUC name -> value."""
        return {guc: getattr(self, key) for key, guc in MONITOR_GUCS.items()}

    def detection_s(self) -> float:
        """The longest time the monitor takes to find a lost primary unhealthy: its last report is
        older than ``node_considered_unhealthy_timeout`` and its health check has failed (one period,
        then the first check and each retry time out, with the retry delay between them)."""
        checks = (self.health_check_period_ms + self.health_check_timeout_ms
                  + self.health_check_max_retries * (self.health_check_retry_delay_ms + self.health_check_timeout_ms))
        return max(self.node_considered_unhealthy_timeout_ms, checks) / 1000

    def failover_bound_s(self) -> float:
        """HAM-3's documented bound for a lost primary: detection, then ``primary_demote_timeout``
        before the promoted secondary may take writes."""
        return self.detection_s() + self.primary_demote_timeout_ms / 1000

    def to_dict(self) -> dict[str, Any]:
        """The JSON form recorded in the run and in ``ham.settings``."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PgafSettings:
        """Inverse of :meth:`to_dict` (ConfigError on a bad value)."""
        return cls(**{k: data[k] for k in DEFAULTS if k in data})


#: The harness's short settings: failure found within 5.5 s, the new primary writable 8 s later (the
#: defaults: 24 s + 30 s); network_partition_timeout 5 s < primary_demote_timeout 8 s.
DEFAULT_SETTINGS = PgafSettings()
