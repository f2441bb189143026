"""The imperative shell: kopf handlers, Kubernetes and GKE I/O around the pure reconcile."""

from dws_operator.controller.config import ConfigError, KueueMode, OperatorConfig, OperatorTime
from dws_operator.controller.runner import OperatorThread, run_operator

__all__ = [
    "ConfigError",
    "KueueMode",
    "OperatorConfig",
    "OperatorThread",
    "OperatorTime",
    "run_operator",
]
