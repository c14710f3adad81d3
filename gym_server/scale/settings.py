"""What `gym-server serve --ray` needs to know beyond the gym's own settings (from the CLI)."""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator


class RayScaleSettings(BaseModel):
    """Replicas on a Ray cluster: how many, where, and when to add or remove one."""

    address: str = Field("auto", description="Ray cluster address; 'local' starts a one-node cluster here")
    min_replicas: int = Field(1, ge=1)
    max_replicas: int = Field(4, ge=1)
    target_sessions: int = Field(
        64, ge=1, description="live sessions per replica above which another replica starts"
    )
    replica_cpus: float = Field(1.0, ge=0, description="Ray CPUs each replica reserves")
    replica_resources: dict[str, float] = Field(
        default_factory=dict, description="custom Ray resources each replica needs, e.g. {'gym': 1}"
    )
    check_interval_s: float = Field(0.5, gt=0, description="how often replicas' health and load are read")
    dead_after_s: float = Field(
        5.0, gt=0, description="a replica that answers no health check for this long is declared dead"
    )
    scale_down_after_s: float = Field(
        10.0, ge=0, description="how long fewer replicas must suffice before one is drained"
    )
    direct_sessions: bool = Field(
        True,
        description="a create's 201 names its replica's own URL (x-gym-replica-url) so that clients step "
        "the replica directly; off where clients cannot reach replicas (behind an ingress)",
    )
    start_timeout_s: float = Field(120.0, gt=0, description="how long a replica may take to answer health")

    @model_validator(mode="after")
    def _bounds(self) -> RayScaleSettings:
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"max_replicas ({self.max_replicas}) < min_replicas ({self.min_replicas})")
        return self
