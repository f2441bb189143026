"""`dws-operator run`: the operator, in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import signal
import sys
from pathlib import Path
from typing import Any

import kopf

from dws_operator.controller import ConfigError, OperatorConfig, run_operator
from dws_operator.controller.logs import configure_logging
from dws_operator.controller.stopping import SLOW_STOP_SECONDS
from dws_operator.kubekit.leader import LeaseSettings


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "run",
        help="run the operator",
        description=(
            "Run the operator against the cluster of KUBECONFIG (or in-cluster credentials). "
            "Flags override the DWS_* environment variables."
        ),
    )
    parser.add_argument("--kubeconfig", type=Path, help="kubeconfig (default: KUBECONFIG)")
    parser.add_argument("--project", help="GCP project of the GKE cluster (DWS_GKE_PROJECT)")
    parser.add_argument("--location", help="GKE cluster location (DWS_GKE_LOCATION)")
    parser.add_argument("--cluster", help="GKE cluster name (DWS_GKE_CLUSTER)")
    parser.add_argument("--gke-endpoint", help="host:port of a GKE emulator (DWS_GKE_ENDPOINT)")
    parser.add_argument(
        "--compute-endpoint",
        help="http://host:port of a Compute emulator, for workload policies (DWS_COMPUTE_ENDPOINT)",
    )
    parser.add_argument("--kueue", help="auto, required or disabled (DWS_KUEUE)")
    parser.add_argument("--default-queue", help="default Kueue LocalQueue (DWS_DEFAULT_QUEUE)")
    parser.add_argument(
        "--queued-queue",
        help="LocalQueue for QueuedProvisioning requests without queueName (DWS_QUEUED_QUEUE)",
    )
    parser.add_argument("--namespaces", help="comma-separated namespaces (DWS_NAMESPACES)")
    parser.add_argument(
        "--running-poll-seconds",
        help="seconds between checks of a running request; Job events wake it sooner "
        "(DWS_RUNNING_POLL_SECONDS, default 300)",
    )
    parser.add_argument("--liveness", help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    parser.add_argument(
        "--leader-elect",
        help="true: replicas take turns on a Lease, only its holder acts (DWS_LEADER_ELECT; "
        "settings: DWS_LEASE_NAMESPACE, DWS_LEASE_NAME, DWS_LEASE_DURATION_SECONDS, "
        "DWS_LEASE_RENEW_DEADLINE_SECONDS, DWS_LEASE_RETRY_PERIOD_SECONDS)",
    )
    parser.add_argument("--lease-namespace", help="namespace of the Lease (default: the pod's own)")
    parser.add_argument(
        "--metrics-port",
        help="port of the Prometheus /metrics endpoint, 0 for none (DWS_METRICS_PORT, "
        "default 8081)",
    )
    parser.add_argument(
        "--log-format", help="text or json: one JSON object per line (DWS_LOG_FORMAT)"
    )
    parser.add_argument(
        "--node-service-account",
        help="Google service account (email) of the nodes of every pool the operator "
        "creates (DWS_NODE_SERVICE_ACCOUNT; default: the Compute Engine default one, with "
        "a warning). Other node settings: DWS_NODE_OAUTH_SCOPES, DWS_NODE_WORKLOAD_METADATA, "
        "DWS_NODE_LABELS, DWS_NODE_TAGS, DWS_NODE_DISK_TYPE, DWS_NODE_DISK_SIZE_GB, "
        "DWS_NODE_IMAGE_STREAMING",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        config = OperatorConfig.from_env(
            project=args.project,
            location=args.location,
            cluster=args.cluster,
            gke_endpoint=args.gke_endpoint,
            compute_endpoint=args.compute_endpoint,
            kueue=args.kueue,
            default_queue=args.default_queue,
            queued_queue=args.queued_queue,
            namespaces=args.namespaces,
            running_poll_seconds=args.running_poll_seconds,
            leader_elect=args.leader_elect,
            lease_namespace=args.lease_namespace,
            metrics_port=args.metrics_port,
            log_format=args.log_format,
            node_service_account=args.node_service_account,
        )
        lease = config.lease_settings()
    except ConfigError as error:
        print(f"dws-operator run: {error}", file=sys.stderr)
        return 2
    configure_logging(config.log_format)
    try:
        asyncio.run(_serve(config, args, lease))
    except Exception as error:
        # A start-up handler's refusal (Kueue missing or too old) arrives wrapped in kopf's
        # ActivityError: one line, not a traceback.
        if isinstance(error.__cause__, kopf.PermanentError):
            print(f"dws-operator run: {error.__cause__}", file=sys.stderr)
            return 1
        raise
    # The interpreter's own exit (library threads, C finalizers) is past logging's
    # reach: one that takes longer than a stop should writes every thread's stack to
    # stderr, so that a slow exit says where it was.
    faulthandler.dump_traceback_later(SLOW_STOP_SECONDS)
    return 0


async def _serve(
    config: OperatorConfig, args: argparse.Namespace, lease: LeaseSettings | None
) -> None:
    """Until SIGINT or SIGTERM (how Kubernetes stops a pod), then a clean kopf shutdown."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await run_operator(
        config,
        kubeconfig=args.kubeconfig,
        stop_flag=stop,
        liveness_endpoint=args.liveness,
        lease=lease,
    )
