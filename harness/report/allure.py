"""Allure helpers used by the pytest plugin: labels from rule IDs, attachments, verdict steps, and the
``categories.json`` / ``environment.properties`` files of a results folder.

Everything that talks to Allure goes through :func:`allure_active`, so a run without ``--alluredir``
does nothing Allure-specific. Labels for a test citing ``@pytest.mark.rule("MIR-5", "MIR-4")``:

* epic = the profile (``MIR`` -> "Mirroring (SQL Server)", ... ``DUR``/``OBS`` -> "Cross-cutting");
* feature = the rule family (``MIR``), story = each rule ID, tag = each rule ID;
* severity from :data:`RULE_SEVERITY` (default ``normal``; the highest of the cited rules wins);
* a link per rule to its text (``docs/rules.md#mir-5``, generated from the RULEBOOK).

No password reaches the results folder: the harness's own attachments are redacted with
:func:`harness.redact.redact_data` / :func:`~harness.redact.redact` before they are attached, and
:func:`install_redaction` makes every result, container and attachment allure-pytest itself writes
(exception messages, traces, captured output and logs) pass through the same function.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.redact import MASK, SECRET_FIELD, redact, redact_data
from harness.rules.verdict import Verdict, VerdictUnknown, assert_verdict

PROFILE_EPICS: dict[str, str] = {
    "MIR": "Mirroring (SQL Server)",
    "PER": "Persistent connections (PolarProxy)",
    "ACR": "Automatic client reroute (DB2)",
    "ICM": "Internet Cluster Manager (Domino)",
    "LPQ": "libpq multi-host rules (PostgreSQL drivers)",
    "APP": "Application pools and ORMs",
    "DUR": "Cross-cutting",
    "OBS": "Cross-cutting",
}

FAMILY_FEATURES: dict[str, str] = {
    "MIR": "MIR - database mirroring client",
    "PER": "PER - persistent connections",
    "ACR": "ACR - automatic client reroute",
    "ICM": "ICM - cluster manager selection",
    "LPQ": "LPQ - libpq multi-host rules",
    "APP": "APP - application pools",
    "DUR": "DUR - durability",
    "OBS": "OBS - observability",
}

# ID -> short title, for every rule in RULEBOOK.md (tests check that none is missing).
RULE_TITLES: dict[str, str] = {
    "MIR-1": "Initial partner first",
    "MIR-2": "Database required",
    "MIR-3": "No failover partner, no alternation",
    "MIR-4": "Alternation",
    "MIR-5": "Retry time schedule",
    "MIR-6": "Truncated last round",
    "MIR-7": "Retry delays",
    "MIR-8": "No timeout, no end",
    "MIR-9": "Partner cache update",
    "MIR-10": "Stale failover partner",
    "MIR-11": "Reconnect is not automatic",
    "MIR-12": "Redirection is transparent in naming",
    "MIR-13": "Shutdown aborts at once",
    "PER-1": "Keepalive on switchover",
    "PER-2": "Session state restored",
    "PER-3": "Recovery window 60 s",
    "PER-4": "Drain window 60 s",
    "PER-5": "Not kept: open temporary tables",
    "PER-6": "Not kept: partial result",
    "PER-7": "Not kept: open transaction",
    "PER-8": "Not kept: cursor / long data",
    "PER-9": "Read-only node removal",
    "PER-10": "Endpoint support",
    "ACR-1": "Server list and special registers",
    "ACR-2": "Seamless first statement",
    "ACR-3": "Non-seamless, transport reusable",
    "ACR-4": "Transport not reusable",
    "ACR-5": "Seamless COMMIT/ROLLBACK after full fetch",
    "ACR-6": "Group-wide address last",
    "ACR-7": "Lazy transport (non-seamless mode)",
    "ACR-8": "Alternate group",
    "ACR-9": "Timeouts",
    "ICM-1": "Candidates",
    "ICM-2": "Availability",
    "ICM-3": "Probe",
    "ICM-4": "Exclusions",
    "ICM-5": "Least loaded",
    "ICM-6": "Last resort",
    "ICM-7": "No transparent failover",
    "LPQ-1": "Hosts in order",
    "LPQ-2": "Next host on failure",
    "LPQ-3": "Per-host timeout",
    "LPQ-4": "Session attributes",
    "LPQ-5": "Authentication failure stops",
    "LPQ-6": "Random order",
    "APP-1": "Recovery bound",
    "APP-2": "Failed requests per fault",
    "APP-3": "Only the right node serves",
    "APP-4": "No stale connection handed out",
    "APP-5": "Pool size respected",
    "DUR-1": "No acknowledged write lost",
    "OBS-1": "Harness error is not a violation",
}

# Allure severities: blocker, critical, normal, minor, trivial. Rules whose breach loses data or
# leaves the application without a connection are critical; the rest normal.
RULE_SEVERITY: dict[str, str] = {
    "DUR-1": "blocker",
    "MIR-4": "critical", "MIR-5": "critical", "MIR-11": "critical",
    "PER-1": "critical", "PER-2": "critical", "PER-3": "critical",
    "ACR-2": "critical", "ACR-3": "critical", "ACR-6": "critical",
    "ICM-5": "critical", "ICM-7": "critical",
    "APP-1": "critical", "APP-3": "critical",
    "OBS-1": "critical",
}
SEVERITY_ORDER = ["trivial", "minor", "normal", "critical", "blocker"]

RULEBOOK_URL_ENV = "FAILOVER_HARNESS_RULEBOOK_URL"


def default_rulebook_url() -> str:
    """The rulebook shipped with the harness (``docs/rules.md``, a ``file://`` URL that opens offline)."""
    from harness.resources import rulebook

    return rulebook().resolve().as_uri()

CATEGORIES: list[dict[str, Any]] = [
    {"name": "Rule violations",
     "description": "The client under test broke a documented rule (RuleViolation, an AssertionError "
                    "whose message starts with the rule ID).",
     "matchedStatuses": ["failed"],
     # allure-pytest prefixes the exception's qualified class name; the rule ID follows it
     "messageRegex": r"(?s)^(?:[\w.]*RuleViolation: )?[A-Z][A-Z0-9_]{0,15}-\d+[: ].*"},  # built-in and user rule IDs
    {"name": "Other test failures",
     "description": "A failed assertion that does not cite a rule ID.",
     "matchedStatuses": ["failed"]},
    {"name": "Verdict unknown",
     "description": "A checker could not decide from the history (VerdictUnknown): never a pass.",
     "matchedStatuses": ["broken"],
     "messageRegex": r"(?s).*verdict unknown.*"},
    {"name": "Harness errors",
     "description": "The harness itself failed (node did not start, proxy did not answer, bad input): "
                    "not a rule violation (OBS-1).",
     "matchedStatuses": ["broken"]},
]


# ----------------------------------------------------------------------------------------- labels


def rule_family(rule_id: str) -> str:
    """``"MIR-5"`` -> ``"MIR"``."""
    return rule_id.partition("-")[0].upper()


def validate_rule_ids(rule_ids: Iterable[str]) -> list[str]:
    """Normalise rule IDs (upper case) and reject anything that is not a RULEBOOK ID (ConfigError)."""
    from harness.errors import ConfigError
    from harness.rules import registry

    out = []
    for rid in rule_ids:
        norm = str(rid).strip().upper()
        if norm not in RULE_TITLES and not registry.is_registered(norm):
            raise ConfigError(f"unknown rule ID {rid!r} in @pytest.mark.rule(...); known IDs are those "
                              f"of docs/rules.md (e.g. MIR-5, APP-1, DUR-1) and user rules registered with "
                              f"harness.rules.registry.rule (in a conftest.py or a module it imports)")
        out.append(norm)
    return out


def rule_link(rule_id: str) -> str:
    """The URL of a rule's text: ``<rules>#mir-5`` - the shipped docs/rules.md (anchors per rule ID,
    generated from the rulebook) unless env FAILOVER_HARNESS_RULEBOOK_URL names another page."""
    base = os.environ.get(RULEBOOK_URL_ENV) or default_rulebook_url()
    return f"{base}#{rule_id.lower()}"


def labels_for_rules(rule_ids: Iterable[str]) -> dict[str, Any]:
    """The Allure labels of a suite test citing ``rule_ids`` (first ID decides the epic)::

        {"epic": ..., "features": [...], "stories": [...], "tags": [...], "severity": ...,
         "links": [(url, name), ...], "title_suffix": "MIR-5 Retry time schedule"}
    """
    from harness.rules import registry

    ids = [r.upper() for r in rule_ids]
    if not ids:
        return {}
    titles = {r: RULE_TITLES.get(r) or registry.title_of(r) for r in ids}
    families = list(dict.fromkeys(rule_family(r) for r in ids))
    severity = max((RULE_SEVERITY.get(r, "normal") for r in ids), key=SEVERITY_ORDER.index)
    return {
        "epic": PROFILE_EPICS.get(families[0], "User rules" if families[0] not in FAMILY_FEATURES else "Cross-cutting"),
        "features": [FAMILY_FEATURES.get(f, f) for f in families],
        "stories": [f"{r} {titles[r]}" if titles[r] else r for r in ids],
        "tags": ids,
        "severity": severity,
        "links": [(rule_link(r), f"{r} {titles[r] or ''}".strip()) for r in ids],
    }


# -------------------------------------------------------------------------------------- live Allure


def allure_active(config: Any) -> bool:
    """True when allure-pytest is recording this run (``--alluredir`` given)."""
    try:
        return bool(config.pluginmanager.has_plugin("allure_listener"))
    except AttributeError:
        return False


def apply_labels(rule_ids: Iterable[str]) -> None:
    """Set the labels of :func:`labels_for_rules` on the running test with ``allure.dynamic``."""
    import allure

    labels = labels_for_rules(rule_ids)
    if not labels:
        return
    allure.dynamic.epic(labels["epic"])
    allure.dynamic.feature(*labels["features"])
    allure.dynamic.story(*labels["stories"])
    allure.dynamic.tag(*labels["tags"])
    allure.dynamic.severity(labels["severity"])
    for url, name in labels["links"]:
        allure.dynamic.link(url, name=name)


#: What tells two runs of one test apart (Allure parameters: part of each result's historyId, so one
#: test run on two engines, two backends or for two clients is two test cases side by side, and
#: the trend counts them apart).
RUN_PARAMETERS = ("engine", "backend", "client")


def run_parameters(engine: str, backend: str, client: str | None) -> dict[str, str]:
    """The Allure parameters of one result: engine, backend and client under test (``reference``
    when none is named: each profile's reference client)."""
    return {"engine": engine, "backend": backend, "client": client or "reference"}


def apply_run_parameters(values: Mapping[str, str]) -> None:
    """Set :func:`run_parameters` on the running test (``allure.dynamic.parameter``)."""
    import allure

    for key, value in values.items():
        allure.dynamic.parameter(key, value)


def runs_in_results(results_dir: Path) -> dict[str, list[str]]:
    """Every engine, backend and client the results of ``results_dir`` were run with (their
    :data:`RUN_PARAMETERS`), each list in the order the runs started; empty lists for results
    without them."""
    seen: dict[str, list[str]] = {k: [] for k in RUN_PARAMETERS}
    results = []
    for path in Path(results_dir).glob("*-result.json"):
        try:
            results.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    for result in sorted(results, key=lambda r: (r.get("start") or 0, r.get("uuid") or "")):
        for p in result.get("parameters") or []:
            name, value = p.get("name"), p.get("value")
            if name in seen and isinstance(value, str):
                value = value.strip("'\"")
                if value not in seen[name]:
                    seen[name].append(value)
    return seen


def attach_history(history_json: str | bytes, svg: str | None, name: str = "history",
                   compressed: bool = False) -> None:
    """Attach a history (JSON lines; ``compressed``: gzip of JSON lines, already redacted when saved)
    and its timeline (SVG) to the running test or fixture, both redacted (no secret in any output)."""
    import allure

    if compressed:
        allure.attach(history_json, name=f"{name}.jsonl.gz (whole history)", attachment_type="application/gzip",
                      extension="jsonl.gz")
    else:
        # JSON lines is not one JSON document: attach it as text so Allure shows it verbatim
        allure.attach(redact_attachment(history_json, "history.jsonl"), name=f"{name}.jsonl",
                      attachment_type="text/plain", extension="jsonl")
    if svg is not None:
        allure.attach(redact(svg), name=f"{name} timeline", attachment_type=allure.attachment_type.SVG)


def redact_attachment(body: str | bytes, file_name: str) -> str | bytes:
    """An attachment's content without passwords, by its kind: JSON redacted value by
    value (it stays valid JSON), JSON lines line by line, anything else as text; bytes that are not
    UTF-8 are returned as they are. The type of ``body`` is kept."""
    as_bytes = isinstance(body, bytes)
    try:
        text = body.decode("utf-8") if isinstance(body, bytes) else body
    except UnicodeDecodeError:
        return body
    suffix = Path(file_name).suffix.lower()
    if suffix == ".json":
        out = _redact_json_text(text)
    elif suffix == ".jsonl":
        out = "\n".join(_redact_json_text(line) if line.strip() else line for line in text.split("\n"))
    else:
        out = redact(text)
    return out.encode("utf-8") if as_bytes else out


def _redact_json_text(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return redact(text)
    clean = redact_data(data)
    if clean == data:
        return text  # keep the original layout
    indent = 2 if "\n" in text.strip() else None
    return json.dumps(clean, ensure_ascii=False, indent=indent, separators=None if indent else (",", ":"))


def _redact_model(obj: Any) -> Any:
    """Redact an allure-commons model object (attrs classes: results, steps, status details,
    parameters…) in place; returns the redacted value for strings and containers."""
    import attr

    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, list):
        obj[:] = [_redact_model(v) for v in obj]
        return obj
    if isinstance(obj, dict):
        for key in list(obj):
            obj[key] = _redact_model(obj[key])
        return obj
    if attr.has(type(obj)):
        secret_name = isinstance(getattr(obj, "name", None), str) and SECRET_FIELD.match(obj.name)
        for f in attr.fields(type(obj)):
            value = getattr(obj, f.name)
            if secret_name and f.name == "value" and value not in (None, ""):
                setattr(obj, f.name, MASK)
            elif isinstance(value, str | list | dict) or attr.has(type(value)):
                setattr(obj, f.name, _redact_model(value))
    return obj


class RedactingResults:
    """allure-commons hooks that keep passwords out of everything allure-pytest writes:
    results and containers are redacted in place before the file logger serialises them; an
    attachment (captured output, logs, anything a test attached) is rewritten redacted right after
    the file logger stored it, when it held a secret."""

    def __init__(self, report_dir: Path) -> None:
        self.report_dir = Path(report_dir)

    def _rewrite(self, file_name: str) -> None:
        path = self.report_dir / file_name
        try:
            body = path.read_bytes()
        except OSError:
            return
        clean = redact_attachment(body, file_name)
        if clean != body:
            _atomic_write(path, clean.decode("utf-8") if isinstance(clean, bytes) else clean)


def _make_redacting_results(report_dir: Path) -> RedactingResults:
    from allure_commons import hookimpl

    class _Plugin(RedactingResults):
        @hookimpl(tryfirst=True)
        def report_result(self, result: Any) -> None:
            _redact_model(result)

        @hookimpl(tryfirst=True)
        def report_container(self, container: Any) -> None:
            _redact_model(container)

        @hookimpl(trylast=True)
        def report_attached_data(self, body: Any, file_name: str) -> None:
            self._rewrite(file_name)

        @hookimpl(trylast=True)
        def report_attached_file(self, source: Any, file_name: str) -> None:
            self._rewrite(file_name)

    return _Plugin(report_dir)


def install_redaction(config: Any) -> RedactingResults | None:
    """With ``--alluredir``: register :class:`RedactingResults` with allure-commons for this pytest
    run (unregistered at its end). Returns the plugin, or None without Allure results."""
    report_dir = getattr(config.option, "allure_report_dir", None)
    if not report_dir:
        return None
    import allure_commons

    plugin = _make_redacting_results(Path(os.path.abspath(report_dir)))
    allure_commons.plugin_manager.register(plugin)
    config.add_cleanup(lambda: allure_commons.plugin_manager.unregister(plugin))
    return plugin


def step_title(verdict: Verdict) -> str:
    """The step title of a verdict: ``MIR-5 Retry time schedule: kept``."""
    title = RULE_TITLES.get(verdict.rule_id)
    return f"{verdict.rule_id}{' ' + title if title else ''}: {verdict.status}"


def verdict_step(verdict: Verdict, active: bool) -> BaseException | None:
    """Record ``verdict`` as an Allure step (passed = kept, failed = violated, broken = unknown) and
    return the exception :func:`assert_verdict` raises for it, or None when kept. Serves OBS-1:
    an unknown verdict is a broken step, never passed."""
    error: BaseException | None = None
    if not active:
        try:
            assert_verdict(verdict)
        except (AssertionError, VerdictUnknown) as exc:
            error = exc
        return error
    import allure

    try:
        with allure.step(step_title(verdict)):
            allure.attach(json.dumps(redact_data(verdict.to_dict()), indent=2, default=str), name="verdict",
                          attachment_type=allure.attachment_type.JSON)
            assert_verdict(verdict)
    except (AssertionError, HarnessError) as exc:
        error = exc
    return error


# ------------------------------------------------------------------------- results folder files


def write_categories(results_dir: Path, overwrite: bool = True) -> Path:
    """Write ``categories.json`` (Rule violations = failed with a rule-ID message; Harness errors =
    broken) into the Allure results folder. Written atomically."""
    path = Path(results_dir) / "categories.json"
    if path.exists() and not overwrite:
        return path
    _atomic_write(path, json.dumps(CATEGORIES, indent=2) + "\n")
    return path


def _prop_escape(text: str) -> str:
    out = str(text).replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return out.replace("=", "\\=").replace(":", "\\:")


def read_environment(results_dir: Path) -> dict[str, str]:
    """The ``environment.properties`` of a results folder as written by :func:`write_environment`
    (empty when there is none)."""
    path = Path(results_dir) / "environment.properties"
    if not path.is_file():
        return {}
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"((?:[^\\=]|\\.)*)=(.*)$", line)
        if m:
            out[_prop_unescape(m.group(1))] = _prop_unescape(m.group(2))
    return out


def _prop_unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "r": "\r"}.get(m.group(1), m.group(1)), text)


def merge_environment(old: Mapping[str, str], new: Mapping[str, Any]) -> dict[str, str]:
    """``new`` over ``old``, except that a key both name with different values lists both (``postgres,
    mariadb``): a results folder that several runs appended to shows every engine, backend and client
    it holds."""
    out = dict(old)
    for key, value in new.items():
        if value is None:
            continue
        value = str(value)
        known = [v.strip() for v in out[key].split(", ")] if key in out else []
        if not known:
            out[key] = value
        elif value not in known:
            out[key] = ", ".join([*known, value])
    return out


def write_environment(results_dir: Path, values: Mapping[str, Any], overwrite: bool = True,
                      merge: bool = False) -> Path:
    """Write ``environment.properties`` (``key=value`` lines, Java properties escaping) into the
    Allure results folder. Written atomically. ``merge``: keep what the file already lists and add
    the values that differ (:func:`merge_environment`)."""
    path = Path(results_dir) / "environment.properties"
    if path.exists() and not overwrite:
        return path
    if merge:
        values = merge_environment(read_environment(results_dir), values)
    lines = [f"{_prop_escape(k).replace(' ', '_')}={_prop_escape(redact(str(v)))}"
             for k, v in values.items() if v is not None]
    _atomic_write(path, "\n".join(lines) + "\n")
    return path


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _run_version(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None and not Path(cmd[0]).exists():
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0].strip() if text else None


def engine_version(engine: str) -> str | None:
    """The installed server version of ``engine`` (``postgres``/``mariadb``), or None."""
    if engine == "postgres":
        from glob import glob

        candidates = sorted(glob("/usr/lib/postgresql/*/bin/postgres"), reverse=True) + ["postgres"]
        for cand in candidates:
            version = _run_version([cand, "--version"])
            if version:
                return version
        return None
    if engine == "mariadb":
        return _run_version(["mariadbd", "--version"])
    return None


def git_revision(root: Path | None = None) -> str | None:
    """``git describe --always --dirty`` of the harness checkout, or None outside git."""
    from harness.resources import checkout_root

    root = root or checkout_root()
    if root is None:  # an installed harness: its version says which it is
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty",
                              "--abbrev=12"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def toxiproxy_version() -> tuple[str, str | None]:
    """(kind, version) of the fault proxy the selection order would pick (``TOXIPROXY_URL``, else a
    ``toxiproxy-server`` via ``TOXIPROXY_SERVER_BIN`` or PATH, else the embedded server); a run's
    topology fixtures replace it with the server they actually started."""
    from harness.toxiproxy.server_choice import planned_choice

    kind, where = planned_choice()
    if kind == "spawned":
        return f"toxiproxy-server ({where})", _run_version([where, "-version"])
    if kind == "external":
        return f"external toxiproxy-server ({where})", None
    import harness

    return "embedded (harness.toxiproxy)", harness.__version__


def collect_environment(backend: str, engine: str, client: str | None, client_version: str | None = None,
                        extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The values of ``environment.properties``: backend, engine and version, fault proxy kind and
    version, client under test and version, harness git revision, machine. ``extra`` (e.g. what the
    topology fixtures learnt at run time) overrides the detected values."""
    import harness

    proxy_kind, proxy_version = toxiproxy_version()
    values: dict[str, Any] = {
        "backend": backend,
        "engine": engine,
        "engine.version": engine_version(engine) or "unknown",
        "fault_proxy": proxy_kind,
        "fault_proxy.version": proxy_version or "unknown",
        "client": client or "reference client of each profile",
        "client.version": client_version or "n/a",
        "harness.version": harness.__version__,
        "harness.revision": git_revision() or "unknown",
        "machine": f"{platform.node()} {platform.system()} {platform.release()} {platform.machine()}, "
                   f"{os.cpu_count()} CPU, Python {platform.python_version()}",
    }
    values.update(extra or {})
    return {k: str(v) for k, v in values.items() if v is not None}
