"""`dws-operator emulator`: serve the GKE and Compute emulators in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from dws_operator.gke.client import ENDPOINT_ENV
from dws_operator.gke.compute_rest import COMPUTE_ENDPOINT_ENV
from dws_workshop.emulator import ClusterManagerEmulator, EmulatorConfig, load_config
from dws_workshop.emulator.compute import ComputeBindError
from dws_workshop.emulator.config import OPERATION_DURATION_PRESETS


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "emulator",
        help="serve a local emulator of the GKE node pool API",
        description=(
            "Serve google.container.v1.ClusterManager (node pools and operations) over "
            "gRPC, and Compute Engine resource policies (workload policies for tpu7x "
            "slices) over HTTP, until SIGINT or SIGTERM. Point the operator at them with "
            f"{ENDPOINT_ENV} and {COMPUTE_ENDPOINT_ENV}."
        ),
    )
    parser.add_argument(
        "--port", type=int, default=0, help="gRPC port to listen on (default: a free one)"
    )
    parser.add_argument(
        "--compute-port",
        type=int,
        default=0,
        help="HTTP port of the Compute API (default: a free one)",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: %(default)s)"
    )
    parser.add_argument(
        "--config",
        type=Path,
        help="YAML file: clusters, operation latency, faults per method, quotas, seed",
    )
    # GKE's limits, over the config file's: so a benchmark needs no file to turn them on.
    parser.add_argument(
        "--operation-durations",
        choices=sorted(OPERATION_DURATION_PRESETS),
        help="simulated operation durations: 'gke' is GKE's (create 40 s, delete 20 s, ...)",
    )
    parser.add_argument(
        "--clock-factor",
        type=_positive(float),
        help="simulated seconds per real second, for operation durations and the rate limit",
    )
    parser.add_argument(
        "--api-rate-limit",
        type=_positive(int),
        help="requests per simulated minute per project (GKE's API quota; default: none)",
    )
    parser.set_defaults(run=run)


def _positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its complaint
    return parse


def config_from(args: argparse.Namespace) -> EmulatorConfig:
    """The config file's settings, with the GKE-limit flags over them."""
    config = load_config(args.config) if args.config else EmulatorConfig()
    overrides = {
        "operation_durations": args.operation_durations,
        "clock_factor": args.clock_factor,
        "api_rate_limit": args.api_rate_limit,
    }
    given = {key: value for key, value in overrides.items() if value is not None}
    if not given:
        return config
    return EmulatorConfig.model_validate({**config.model_dump(), **given})


def run(args: argparse.Namespace) -> int:
    try:
        config = config_from(args)
    except (OSError, yaml.YAMLError, ValidationError) as error:
        detail = " ".join(str(error).split())
        sys.stderr.write(f"dws-operator emulator: --config ({args.config}: {detail})\n")
        return 2
    try:
        return asyncio.run(
            serve(config, host=args.host, port=args.port, compute_port=args.compute_port)
        )
    except ComputeBindError as error:
        sys.stderr.write(f"dws-operator emulator: --compute-port ({error})\n")
        return 2
    except OSError as error:
        sys.stderr.write(f"dws-operator emulator: --port ({error})\n")
        return 2


async def serve(
    config: EmulatorConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    compute_port: int = 0,
    stop: asyncio.Event | None = None,
) -> int:
    """Serve until `stop` is set, or until SIGINT or SIGTERM."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    installed = []
    for signum in signals:
        try:
            loop.add_signal_handler(signum, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # not the main thread: only `stop` ends the server
        installed.append(signum)
    try:
        emulator = ClusterManagerEmulator(config, host=host, port=port, compute_port=compute_port)
        async with emulator:
            print(f"serving google.container.v1.ClusterManager on {emulator.endpoint}")
            print(f"serving Compute Engine resource policies on {emulator.compute_endpoint}")
            for cluster in config.clusters:
                print(f"cluster {cluster.name}")
            print(f"export {ENDPOINT_ENV}={emulator.endpoint}")
            print(f"export {COMPUTE_ENDPOINT_ENV}={emulator.compute_endpoint}", flush=True)
            await stop.wait()
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
    return 0
