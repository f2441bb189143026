"""Operator settings from flags and the environment; a bad setting is one clear line."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from dws_operator.api.base import DNS_LABEL_PATTERN
from dws_operator.controller.history import DEFAULT_NAME as DEFAULT_HISTORY_NAME
from dws_operator.gke.pool_defaults import PoolDefaults, PoolDefaultsError, parse_pool_defaults
from dws_operator.kubekit.leader import (
    LEASE_DURATION_SECONDS,
    RENEW_DEADLINE_SECONDS,
    RETRY_PERIOD_SECONDS,
    LeaseSettings,
    default_identity,
    default_namespace,
)
from dws_operator.reconcile import MAX_RECOVERIES, RUNNING_POLL_SECONDS, STUCK_AFTER_SECONDS

_PROJECT_RE = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
_LOCATION_RE = re.compile(r"^[a-z]+-[a-z]+[0-9]+(-[a-z])?$")
_CLUSTER_RE = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")
_ENDPOINT_RE = re.compile(r"^[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}$")
_HTTP_ENDPOINT_RE = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}$")
_CONFIGMAP_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


#: `/metrics` listens here unless told otherwise (the chart's `metrics.port`); the
#: liveness endpoint has 8080.
DEFAULT_METRICS_PORT = 8081
LOG_FORMATS = ("text", "json")


class KueueMode(StrEnum):
    AUTO = "auto"
    REQUIRED = "required"
    DISABLED = "disabled"


class ConfigError(ValueError):
    """A missing or malformed operator setting."""


#: The operator's Lease (every replica competes for it), unless DWS_LEASE_NAME says.
LEASE_NAME = "dws-operator"


@dataclass(frozen=True)
class LeaseConfig:
    """Leader election's settings; the namespace defaults to the pod's own."""

    namespace: str | None = None
    name: str = LEASE_NAME
    duration: float = LEASE_DURATION_SECONDS
    renew_deadline: float = RENEW_DEADLINE_SECONDS
    retry_period: float = RETRY_PERIOD_SECONDS


#: How long an idle pool waits for a request of its shape before it is deleted.
IDLE_SECONDS = 300.0
#: How long a pool the operator made stays an orphan (its request gone, yet not idle)
#: with no Node on it before it is deleted: reported at once, collected only once nothing
#: can be running on it and the moment that made it (a crash, a forced finalizer
#: removal) is long past.
ORPHAN_GRACE_SECONDS = 600.0


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _real_time() -> float:
    return 1.0


@dataclass(frozen=True)
class OperatorTime:
    """The time the operator decides in: the wall clock, or (in process only: a sandbox
    or a test) a simulated one that runs `speed()` times faster, as the GKE emulator's
    does, so a calendar block of days starts and ends in seconds on both sides."""

    now: Callable[[], datetime] = _utc_now
    #: Simulated seconds per real second now (a test may change it as it goes).
    speed: Callable[[], float] = _real_time
    #: The longest real wait for a timer: a simulated clock may be moved on at once,
    #: and a timer set before that must not sleep through what is due now.
    longest_wait: float = float("inf")
    #: The shortest real wait for a timer of more than that: a few simulated seconds
    #: are microseconds, and a request waiting on something would spin.
    shortest_wait: float = 0.2

    def real_seconds(self, seconds: float) -> float:
        """Real seconds to wait for a timer of `seconds` (the decision's time)."""
        scaled = seconds / self.speed()
        return min(max(scaled, min(seconds, self.shortest_wait)), self.longest_wait)


@dataclass(frozen=True)
class OperatorConfig:
    project: str
    location: str
    cluster: str
    gke_endpoint: str | None = None
    kueue: KueueMode = KueueMode.AUTO
    default_queue: str | None = None
    #: LocalQueue for QueuedProvisioning requests without queueName (its ClusterQueue
    #: carries the ProvisioningRequest admission check).
    queued_queue: str | None = None
    #: Empty: every namespace.
    namespaces: tuple[str, ...] = ()
    #: Seconds between passes over a running request; its Job's events wake it sooner.
    running_poll_seconds: float = RUNNING_POLL_SECONDS
    #: Compute API emulator (`http://host:port`) for workload policies; None: Google's.
    compute_endpoint: str | None = None
    #: Node pool operations the operator runs at once in the cluster: GKE's
    #: concurrent-operations quota (5 unless Google raised the cluster's).
    gke_operation_slots: int = 5
    #: Seconds between two ListNodePools that every request shares.
    gke_refresh_seconds: float = 10.0
    #: How long a finished request's pool, at zero, waits for the next request of its
    #: shape before it is deleted; 0: pools are never reused (nor deleted for idling).
    pool_idle_seconds: float = IDLE_SECONDS
    #: Leader election on a Lease (for more than one replica); None: off (one replica).
    lease: LeaseConfig | None = None
    #: Port of `/metrics` (Prometheus); 0: any free port (tests); None: no endpoint.
    metrics_port: int | None = None
    #: Address `/metrics` listens on: every interface in a pod, 127.0.0.1 in tests.
    metrics_address: str = "0.0.0.0"
    #: `text` (people) or `json` (one object per line, for log pipelines).
    log_format: str = "text"
    #: What every node pool the operator creates gets: service account, scopes,
    #: metadata mode, extra labels, tags, boot disk, image streaming (DWS_NODE_*).
    pool_defaults: PoolDefaults = field(default_factory=PoolDefaults)
    #: How long a pool the operator made whose request is gone (an orphan, counted by
    #: `dws_orphaned_node_pools`) has had no Node before it is deleted.
    orphan_grace_seconds: float = ORPHAN_GRACE_SECONDS
    #: A queued request's ProvisioningRequest Accepted this long and not provisioned is
    #: made again (DWS_STUCK_AFTER_SECONDS; 0: never); at most `max_recoveries` times a
    #: ladder step (DWS_MAX_RECOVERIES).
    stuck_after_seconds: float = STUCK_AFTER_SECONDS
    max_recoveries: int = MAX_RECOVERIES
    #: Calendar-mode bookings are submitted without spec.approveBooking (DWS_BOOK_WITHOUT_APPROVAL).
    book_without_approval: bool = False
    #: The ConfigMap (in the operator's namespace) the history of waits for capacity is
    #: kept in (DWS_CAPACITY_HISTORY, whose default is `DEFAULT_HISTORY_NAME`); None: the
    #: history is kept in memory only (an operator built in code, as the tests' are).
    capacity_history: str | None = None
    #: The time decisions are made in; never read from the environment.
    time: OperatorTime = field(default_factory=OperatorTime)

    @property
    def operator_namespace(self) -> str:
        """Where the operator keeps its Lease and its capacity history."""
        return (self.lease.namespace if self.lease else None) or default_namespace()

    def lease_settings(self) -> LeaseSettings | None:
        """This process's candidacy for the Lease, None without leader election."""
        if self.lease is None:
            return None
        return LeaseSettings(
            namespace=self.lease.namespace or default_namespace(),
            identity=default_identity(),
            name=self.lease.name,
            duration=self.lease.duration,
            renew_deadline=self.lease.renew_deadline,
            retry_period=self.lease.retry_period,
        )

    @property
    def cluster_path(self) -> str:
        return f"projects/{self.project}/locations/{self.location}/clusters/{self.cluster}"

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] = os.environ, **overrides: str | None
    ) -> OperatorConfig:
        """Flags (`overrides`, None = not given) win over DWS_* environment variables."""

        def get(key: str, env: str) -> str | None:
            value = overrides.get(key)
            return value if value is not None else (environ.get(env) or None)

        project = _required(get("project", "DWS_GKE_PROJECT"), "DWS_GKE_PROJECT", "--project")
        location = _required(get("location", "DWS_GKE_LOCATION"), "DWS_GKE_LOCATION", "--location")
        cluster = _required(get("cluster", "DWS_GKE_CLUSTER"), "DWS_GKE_CLUSTER", "--cluster")
        _check(project, _PROJECT_RE, "DWS_GKE_PROJECT", "a GCP project id such as my-project")
        _check(location, _LOCATION_RE, "DWS_GKE_LOCATION", "a region or zone such as us-east5")
        _check(cluster, _CLUSTER_RE, "DWS_GKE_CLUSTER", "a GKE cluster name")
        endpoint = get("gke_endpoint", "DWS_GKE_ENDPOINT")
        if endpoint is not None:
            _check(endpoint, _ENDPOINT_RE, "DWS_GKE_ENDPOINT", "host:port of a GKE API emulator")
        kueue_text = (get("kueue", "DWS_KUEUE") or KueueMode.AUTO.value).lower()
        try:
            kueue = KueueMode(kueue_text)
        except ValueError:
            raise ConfigError(
                f"DWS_KUEUE={kueue_text!r} is not valid; use auto, required or disabled"
            ) from None
        queue = get("default_queue", "DWS_DEFAULT_QUEUE")
        if queue is not None:
            _check(queue, re.compile(DNS_LABEL_PATTERN), "DWS_DEFAULT_QUEUE", "a LocalQueue name")
        queued = get("queued_queue", "DWS_QUEUED_QUEUE")
        if queued is not None:
            _check(queued, re.compile(DNS_LABEL_PATTERN), "DWS_QUEUED_QUEUE", "a LocalQueue name")
        namespaces_text = get("namespaces", "DWS_NAMESPACES") or ""
        namespaces = tuple(n.strip() for n in namespaces_text.split(",") if n.strip())
        for namespace in namespaces:
            _check(namespace, re.compile(DNS_LABEL_PATTERN), "DWS_NAMESPACES", "namespace names")
        poll_text = get("running_poll_seconds", "DWS_RUNNING_POLL_SECONDS")
        poll = RUNNING_POLL_SECONDS if poll_text is None else _poll_seconds(poll_text)
        compute = get("compute_endpoint", "DWS_COMPUTE_ENDPOINT")
        if compute is not None:
            _check(
                compute,
                _HTTP_ENDPOINT_RE,
                "DWS_COMPUTE_ENDPOINT",
                "http://host:port of a Compute API emulator",
            )
        slots_text = get("gke_operation_slots", "DWS_GKE_OPERATION_SLOTS")
        slots = 5 if slots_text is None else _whole(slots_text, "DWS_GKE_OPERATION_SLOTS", 1, 100)
        refresh_text = get("gke_refresh_seconds", "DWS_GKE_REFRESH_SECONDS")
        refresh = (
            10.0
            if refresh_text is None
            else _seconds(refresh_text, "DWS_GKE_REFRESH_SECONDS", 1.0, 3600.0)
        )
        idle_text = get("pool_idle_seconds", "DWS_POOL_IDLE_SECONDS")
        idle = IDLE_SECONDS if idle_text is None else _idle_seconds(idle_text)
        lease = _lease(get)
        metrics_text = get("metrics_port", "DWS_METRICS_PORT")
        metrics_port = (
            DEFAULT_METRICS_PORT
            if metrics_text is None
            else _whole(metrics_text, "DWS_METRICS_PORT", 0, 65535)
        )
        metrics_address = get("metrics_address", "DWS_METRICS_ADDRESS") or "0.0.0.0"
        try:
            ipaddress.ip_address(metrics_address)
        except ValueError:
            raise ConfigError(
                f"DWS_METRICS_ADDRESS={metrics_address!r} is not valid; expected an IP address "
                "such as 0.0.0.0 or 127.0.0.1"
            ) from None
        log_format = (get("log_format", "DWS_LOG_FORMAT") or "text").strip().lower()
        if log_format not in LOG_FORMATS:
            raise ConfigError(f"DWS_LOG_FORMAT={log_format!r} is not valid; use text or json")
        pool_defaults = _pool_defaults(get)
        return cls(
            project,
            location,
            cluster,
            endpoint,
            kueue,
            queue,
            queued,
            namespaces,
            poll,
            compute,
            slots,
            refresh,
            idle,
            lease,
            # 0 turns the endpoint off, as controller-runtime's metrics address does.
            metrics_port=metrics_port or None,
            metrics_address=metrics_address,
            log_format=log_format,
            pool_defaults=pool_defaults,
            orphan_grace_seconds=_orphan_grace(get),
            book_without_approval=_book_without_approval(get),
            capacity_history=_capacity_history(get),
            stuck_after_seconds=_stuck_after(get),
            max_recoveries=_max_recoveries(get),
        )


def _stuck_after(get: Callable[[str, str], str | None]) -> float:
    text = get("stuck_after_seconds", "DWS_STUCK_AFTER_SECONDS")
    if text is None:
        return STUCK_AFTER_SECONDS
    if text.strip() in ("0", "0.0"):
        return 0.0
    return _seconds(text, "DWS_STUCK_AFTER_SECONDS", 60.0, 7 * 24 * 3600.0)


def _max_recoveries(get: Callable[[str, str], str | None]) -> int:
    text = (get("max_recoveries", "DWS_MAX_RECOVERIES") or str(MAX_RECOVERIES)).strip()
    if not text.isdigit() or int(text) > 10:
        raise ConfigError(f"DWS_MAX_RECOVERIES={text!r} is not valid; expected 0 to 10")
    return int(text)


def _capacity_history(get: Callable[[str, str], str | None]) -> str | None:
    """The ConfigMap's name; `-` keeps the history in memory only."""
    name = (get("capacity_history", "DWS_CAPACITY_HISTORY") or DEFAULT_HISTORY_NAME).strip()
    if name == "-":
        return None
    if not _CONFIGMAP_NAME.match(name) or len(name) > 253:
        raise ConfigError(
            f"DWS_CAPACITY_HISTORY={name!r} is not a ConfigMap name (lowercase letters, "
            "digits, '-' and '.'), or '-' to keep the history in memory only"
        )
    return name


def _book_without_approval(get: Callable[[str, str], str | None]) -> bool:
    text = (get("book_without_approval", "DWS_BOOK_WITHOUT_APPROVAL") or "false").strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"DWS_BOOK_WITHOUT_APPROVAL={text!r} is not valid; use true or false")
    return text == "true"


def _pool_defaults(get: Callable[[str, str], str | None]) -> PoolDefaults:
    try:
        return parse_pool_defaults(get)
    except PoolDefaultsError as error:
        raise ConfigError(str(error)) from None


def _lease(get: Callable[[str, str], str | None]) -> LeaseConfig | None:
    elect = (get("leader_elect", "DWS_LEADER_ELECT") or "false").strip().lower()
    if elect not in ("true", "false"):
        raise ConfigError(f"DWS_LEADER_ELECT={elect!r} is not valid; use true or false")
    if elect == "false":
        return None
    namespace = get("lease_namespace", "DWS_LEASE_NAMESPACE")
    if namespace is not None:
        _check(namespace, re.compile(DNS_LABEL_PATTERN), "DWS_LEASE_NAMESPACE", "a namespace")
    name = get("lease_name", "DWS_LEASE_NAME") or LEASE_NAME
    _check(name, re.compile(DNS_LABEL_PATTERN), "DWS_LEASE_NAME", "a Lease name")

    def seconds(key: str, env: str, default: float) -> float:
        text = get(key, env)
        return default if text is None else _seconds(text, env, 0.1, 3600.0)

    config = LeaseConfig(
        namespace,
        name,
        seconds("lease_duration", "DWS_LEASE_DURATION_SECONDS", LEASE_DURATION_SECONDS),
        seconds("lease_renew_deadline", "DWS_LEASE_RENEW_DEADLINE_SECONDS", RENEW_DEADLINE_SECONDS),
        seconds("lease_retry_period", "DWS_LEASE_RETRY_PERIOD_SECONDS", RETRY_PERIOD_SECONDS),
    )
    try:  # the same checks as the Lease's own (client-go's)
        LeaseSettings(
            "default", "check", name, config.duration, config.renew_deadline, config.retry_period
        )
    except ValueError as error:
        raise ConfigError(f"leader election: {error}") from None
    return config


def _orphan_grace(get: Callable[[str, str], str | None]) -> float:
    text = get("orphan_grace_seconds", "DWS_ORPHAN_GRACE_SECONDS")
    if text is None:
        return ORPHAN_GRACE_SECONDS
    return _seconds(text, "DWS_ORPHAN_GRACE_SECONDS", 1.0, 7 * 24 * 3600.0)


def _poll_seconds(text: str) -> float:
    return _seconds(text, "DWS_RUNNING_POLL_SECONDS", 1.0, 3600.0)


def _idle_seconds(text: str) -> float:
    if text.strip() in ("0", "0.0"):
        return 0.0
    return _seconds(text, "DWS_POOL_IDLE_SECONDS", 1.0, 7 * 24 * 3600.0)


def _seconds(text: str, env: str, low: float, high: float) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not low <= value <= high:
        raise ConfigError(f"{env}={text!r} is not valid; expected seconds from {low:g} to {high:g}")
    return value


def _whole(text: str, env: str, low: int, high: int) -> int:
    value = int(text) if text.strip().isdigit() else -1
    if not low <= value <= high:
        raise ConfigError(f"{env}={text!r} is not valid; expected a whole number {low}-{high}")
    return value


def _required(value: str | None, env: str, flag: str) -> str:
    if not value:
        raise ConfigError(f"{env} is not set; set it (or pass {flag}) to the GKE cluster's value")
    return value


def _check(value: str, pattern: re.Pattern[str], env: str, expected: str) -> None:
    if not pattern.match(value):
        raise ConfigError(f"{env}={value!r} is not valid; expected {expected}")
