"""gym-server: sandboxed multi-turn tool environments and verifiers over HTTP for RL of LLM agents.

The names below are the SDK promised to environment authors; everything else is internal.
"""

from gym_server.core import log_redaction, moved
from gym_server.core.errors import GymError
from gym_server.sdk.environment import Environment, ForkMode, StepOutcome, VerifyResult
from gym_server.sdk.probes import HackProbe
from gym_server.sdk.registry import Registry
from gym_server.sdk.tasks import Dataset, Task
from gym_server.sdk.tools import ToolError, tool

__version__ = "0.1.0"

log_redaction.install()  # before anything logs: no log line of the server, CLI or clients holds a key
moved.install()  # the 0.1 import paths of the code now in the workspace's other distributions, until 0.3

__all__ = [
    "Dataset",
    "Environment",
    "ForkMode",
    "GymError",
    "HackProbe",
    "Registry",
    "StepOutcome",
    "Task",
    "ToolError",
    "VerifyResult",
    "__version__",
    "tool",
]
