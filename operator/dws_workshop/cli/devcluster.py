"""`dws-operator devcluster up`: a local control plane in the foreground until interrupted."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from dws_workshop.devcluster import DevCluster, DevClusterError, DevClusterOptions, MissingBinaries
from dws_workshop.devcluster.crds import install_third_party_crds, install_training_request_crd


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "devcluster",
        help="run a local Kubernetes control plane (etcd + kube-apiserver, ...)",
        description="A real Kubernetes control plane on 127.0.0.1, built from pinned Go modules.",
    )
    actions = parser.add_subparsers(dest="action", required=True)
    up = actions.add_parser("up", help="start it and stay in the foreground until Ctrl-C")
    up.add_argument(
        "--kubeconfig", type=Path, required=True, help="write the admin kubeconfig here"
    )
    up.add_argument(
        "--with-controllers",
        action="store_true",
        help="also run kube-controller-manager and kube-scheduler",
    )
    up.add_argument("--with-kwok", action="store_true", help="also run kwok (fake nodes)")
    up.add_argument(
        "--third-party-crds",
        action="store_true",
        help="also install Kueue's, JobSet's and the ProvisioningRequest CRDs",
    )
    up.set_defaults(run=run)


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def run(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    # Started in the background of a script, SIGINT arrives ignored; Ctrl-C must still work.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    options = DevClusterOptions(
        controllers=args.with_controllers or args.with_kwok,
        kwok=args.with_kwok,
        kubeconfig=args.kubeconfig.resolve(),
    )
    try:
        with DevCluster(options) as cluster:
            api = cluster.api_client()
            install_training_request_crd(api)
            if args.third_party_crds:
                install_third_party_crds(api)
            print(
                f"dws-operator: control plane ready in {cluster.startup_seconds:.1f}s at "
                f"{cluster.server}",
                file=sys.stderr,
            )
            print(
                f"dws-operator: kubectl --kubeconfig {cluster.kubeconfig} get trainingrequests",
                file=sys.stderr,
            )
            print(cluster.kubeconfig, flush=True)
            threading.Event().wait()
    except KeyboardInterrupt:
        return 130
    except (DevClusterError, MissingBinaries) as error:
        print(f"dws-operator devcluster: {error}", file=sys.stderr)
        return 1
    return 0
