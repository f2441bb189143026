"""How the GKE and Compute clients retry a failed call and poll a running operation:
`RetryPolicy`, a bounded number of attempts with jittered exponential backoff between
them (the node pool client, the workload policy and booking clients), and `PollPolicy`,
exponential backoff under an overall deadline."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PollPolicy:
    """How `wait` polls an operation: exponential backoff under an overall deadline."""

    initial_delay: float = 1.0
    max_delay: float = 30.0
    multiplier: float = 2.0
    #: Creating a TPU slice can take many minutes; past this the caller requeues.
    timeout: float = 1800.0


@dataclass(frozen=True)
class RetryPolicy:
    """How `call` retries retryable errors: `attempts` calls in all, backing off between.

    The defaults bound one call to about 4 attempts within ~7 s, short enough that a
    reconcile worker is not stalled and long enough to ride out a GKE hiccup.
    """

    attempts: int = 4
    initial_delay: float = 1.0
    multiplier: float = 2.0
    max_delay: float = 8.0
    #: Each pause is drawn from [delay * (1 - jitter), delay], so many requests
    #: failing together do not retry in lockstep.
    jitter: float = 0.5

    def delays(self) -> list[float]:
        """The pauses between attempts, before jitter (one fewer than attempts)."""
        return [
            min(self.initial_delay * self.multiplier**i, self.max_delay)
            for i in range(self.attempts - 1)
        ]
