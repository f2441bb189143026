"""`dws-operator dev`: the control plane, the GKE emulator and its autoscaler, and the
operator on one machine, following one TrainingRequest on the terminal."""

from dws_workshop.sandbox.session import Sandbox, SandboxOptions

__all__ = ["Sandbox", "SandboxOptions"]
