"""The facts sheet's tables, restated independently of the catalog so tests can catch drift.

(version, topology, machine type or None for the default) -> (machine type, nodes).
"""

from __future__ import annotations

TPU_LABELS = {
    "v4": "tpu-v4-podslice",
    "v5e": "tpu-v5-lite-podslice",
    "v5p": "tpu-v5p-slice",
    "v6e": "tpu-v6e-slice",
    "tpu7x": "tpu7x",
}

TPU_MACHINE_CHIPS = {
    "ct4p-hightpu-4t": 4,
    "ct5lp-hightpu-1t": 1,
    "ct5lp-hightpu-4t": 4,
    "ct5lp-hightpu-8t": 8,
    "ct5p-hightpu-4t": 4,
    "ct6e-standard-1t": 1,
    "ct6e-standard-4t": 4,
    "ct6e-standard-8t": 8,
    "tpu7x-standard-1t": 1,
    "tpu7x-standard-4t": 4,
}

# Every topology row of section 1, with the default machine type and resulting nodes,
# plus the explicit alternatives the table names (2x4 on 8t: one VM).
TPU_ROWS: list[tuple[str, str, str | None, str, int]] = [
    # version, topology, requested machine type, resolved machine type, nodes
    ("v4", "2x2x1", None, "ct4p-hightpu-4t", 1),
    ("v4", "2x2x2", None, "ct4p-hightpu-4t", 2),
    ("v4", "2x2x4", None, "ct4p-hightpu-4t", 4),
    ("v4", "2x4x4", None, "ct4p-hightpu-4t", 8),
    ("v4", "4x4x4", None, "ct4p-hightpu-4t", 16),
    ("v4", "4x4x8", None, "ct4p-hightpu-4t", 32),
    ("v4", "8x8x8", None, "ct4p-hightpu-4t", 128),
    ("v4", "4x4x256", None, "ct4p-hightpu-4t", 1024),  # 64 cubes: the v4 maximum
    ("v4", "16x16x16", None, "ct4p-hightpu-4t", 1024),
    ("v5e", "1x1", None, "ct5lp-hightpu-1t", 1),
    ("v5e", "1x1", "ct5lp-hightpu-1t", "ct5lp-hightpu-1t", 1),
    ("v5e", "2x2", None, "ct5lp-hightpu-4t", 1),
    ("v5e", "2x4", None, "ct5lp-hightpu-4t", 2),
    ("v5e", "2x4", "ct5lp-hightpu-8t", "ct5lp-hightpu-8t", 1),
    ("v5e", "4x4", None, "ct5lp-hightpu-4t", 4),
    ("v5e", "4x8", None, "ct5lp-hightpu-4t", 8),
    ("v5e", "8x8", None, "ct5lp-hightpu-4t", 16),
    ("v5e", "8x16", None, "ct5lp-hightpu-4t", 32),
    ("v5e", "16x16", None, "ct5lp-hightpu-4t", 64),
    ("v5p", "2x2x1", None, "ct5p-hightpu-4t", 1),
    ("v5p", "2x2x2", None, "ct5p-hightpu-4t", 2),
    ("v5p", "2x2x4", None, "ct5p-hightpu-4t", 4),
    ("v5p", "2x4x4", None, "ct5p-hightpu-4t", 8),
    ("v5p", "4x4x4", None, "ct5p-hightpu-4t", 16),
    ("v5p", "4x4x8", None, "ct5p-hightpu-4t", 32),
    ("v5p", "8x8x8", None, "ct5p-hightpu-4t", 128),
    ("v5p", "8x16x16", None, "ct5p-hightpu-4t", 512),
    ("v5p", "4x4x560", None, "ct5p-hightpu-4t", 2240),  # 140 cubes: the v5p maximum
    ("v6e", "1x1", None, "ct6e-standard-1t", 1),
    ("v6e", "2x2", None, "ct6e-standard-4t", 1),
    ("v6e", "2x4", None, "ct6e-standard-4t", 2),
    ("v6e", "2x4", "ct6e-standard-4t", "ct6e-standard-4t", 2),
    ("v6e", "2x4", "ct6e-standard-8t", "ct6e-standard-8t", 1),
    ("v6e", "4x4", None, "ct6e-standard-4t", 4),
    ("v6e", "4x4", "ct6e-standard-4t", "ct6e-standard-4t", 4),
    ("v6e", "4x8", None, "ct6e-standard-4t", 8),
    ("v6e", "8x8", None, "ct6e-standard-4t", 16),
    ("v6e", "8x16", None, "ct6e-standard-4t", 32),
    ("v6e", "16x16", None, "ct6e-standard-4t", 64),
    ("tpu7x", "1x1x1", None, "tpu7x-standard-1t", 1),
    ("tpu7x", "2x2x1", None, "tpu7x-standard-4t", 1),
    ("tpu7x", "2x2x2", None, "tpu7x-standard-4t", 2),
    ("tpu7x", "2x2x4", None, "tpu7x-standard-4t", 4),
    ("tpu7x", "2x4x4", None, "tpu7x-standard-4t", 8),
    ("tpu7x", "4x4x4", None, "tpu7x-standard-4t", 16),
    ("tpu7x", "4x4x8", None, "tpu7x-standard-4t", 32),
    ("tpu7x", "12x12x16", None, "tpu7x-standard-4t", 576),  # 36 cubes
    ("tpu7x", "4x4x576", None, "tpu7x-standard-4t", 2304),  # 144 cubes: the tpu7x maximum
]

# Section 2: every machine type and its GPUs per VM.
GPU_MACHINES: dict[str, dict[str, int]] = {
    "nvidia-l4": {
        "g2-standard-4": 1,
        "g2-standard-8": 1,
        "g2-standard-12": 1,
        "g2-standard-16": 1,
        "g2-standard-32": 1,
        "g2-standard-24": 2,
        "g2-standard-48": 4,
        "g2-standard-96": 8,
    },
    "nvidia-tesla-a100": {
        "a2-highgpu-1g": 1,
        "a2-highgpu-2g": 2,
        "a2-highgpu-4g": 4,
        "a2-highgpu-8g": 8,
        "a2-megagpu-16g": 16,
    },
    "nvidia-a100-80gb": {
        "a2-ultragpu-1g": 1,
        "a2-ultragpu-2g": 2,
        "a2-ultragpu-4g": 4,
        "a2-ultragpu-8g": 8,
    },
    "nvidia-h100-80gb": {
        "a3-highgpu-1g": 1,
        "a3-highgpu-2g": 2,
        "a3-highgpu-4g": 4,
        "a3-highgpu-8g": 8,
    },
    "nvidia-h100-mega-80gb": {"a3-megagpu-8g": 8},
    "nvidia-h200-141gb": {"a3-ultragpu-8g": 8},
    "nvidia-b200": {"a4-highgpu-8g": 8},
    "nvidia-gb200": {"a4x-highgpu-4g": 4},
}

#: Seed 000: DWS flex-start serves L4, A100, H100, H200 and B200.
FLEX_START_GPUS = {
    "nvidia-l4",
    "nvidia-tesla-a100",
    "nvidia-a100-80gb",
    "nvidia-h100-80gb",
    "nvidia-h100-mega-80gb",
    "nvidia-h200-141gb",
    "nvidia-b200",
}
