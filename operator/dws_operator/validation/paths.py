"""Where in a TrainingRequest each rule's field is: the paths its `SpecError`s name."""

from __future__ import annotations

TPU_PATH = "spec.accelerator.tpu"
GPU_PATH = "spec.accelerator.gpu"
PROVISIONING_PATH = "spec.provisioning"
FALLBACK_PATH = "spec.provisioning.fallback"
NODE_POOL_PATH = "spec.nodePool"
RUN_PATH = "spec.run"
