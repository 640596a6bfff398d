"""The shipped suites, one package per profile (installed as ``failover_harness_suites``)."""
