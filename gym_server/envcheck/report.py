"""The report `gym-server env check` prints and returns as JSON."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CheckResult", "EnvCheckReport", "Status"]

Status = Literal["pass", "warn", "fail", "skip"]


class CheckResult(BaseModel):
    """One check's outcome. `fail` blocks; `warn` is worth reading; `skip`: it does not apply here."""

    model_config = ConfigDict(extra="forbid")

    name: str
    status: Status
    detail: str
    data: dict[str, Any] = Field(default_factory=dict)


class EnvCheckReport(BaseModel):
    """Every check of one environment, with the facts that identify it."""

    model_config = ConfigDict(extra="forbid")

    env: str
    version: str
    kind: Literal["single-turn", "multi-turn"]
    tools: list[str]
    tasks: dict[str, int]
    checks: list[CheckResult]
    seconds: float

    @property
    def ok(self) -> bool:
        """No check failed (warnings and skips pass)."""
        return all(check.status != "fail" for check in self.checks)

    def get(self, name: str) -> CheckResult:
        """The check named `name` (KeyError when the report has none)."""
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(name)
