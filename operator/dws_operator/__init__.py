"""dws-operator: ML training on GKE's Dynamic Workload Scheduler, from one TrainingRequest."""

__version__ = "0.1.0"
