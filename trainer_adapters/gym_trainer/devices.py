"""Where a model runs and in what precision: one resolver for every command that loads a model.

`demo`, `policy serve`, the examples and the GPU benchmark take `--device auto|cpu|cuda|cuda:N` and
`--dtype auto|fp32|bf16` and hand them to `resolve`, so the rules live here once:

- `auto` device: `cuda` (the current CUDA device, normally 0) when `torch.cuda.is_available()`, else `cpu`.
  MPS and other backends are never picked: nothing here has been run on them.
- `cuda` / `cuda:N`: CUDA must be usable, or `DeviceUnavailable` names what is missing (a CPU-only
  torch build, no driver or no visible GPU, or an index past the visible GPUs). The commands print that
  one line and exit 2, before anything slow starts. `Placement.activate()` makes `cuda:N` the current
  device, so code that says plain `cuda` (accelerate's single-process Trainer) lands on the same GPU.
- `auto` dtype: `bf16` on a GPU that supports it, else `fp32`. On the CPU it is always `fp32`: a CPU
  without bf16 units runs bf16 matmuls slower than fp32, and the CPU path is the token-exact one (the
  logprobs the sampler reports are what the trainer scores, in the same precision). `bf16` can still be
  asked for on the CPU. fp16 is not offered: GRPO's importance ratios overflow in it.

torch is imported inside the functions, so parsing a choice costs nothing.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = [
    "DEVICE_HELP",
    "DTYPE_HELP",
    "DeviceUnavailable",
    "Placement",
    "parse_device",
    "resolve",
    "resolve_or_exit",
]

DEVICE_HELP = "auto (CUDA when available), cpu, cuda or cuda:N"
DTYPE_HELP = "auto (bf16 on a GPU that has it, else fp32), fp32 or bf16"
_DEVICE = re.compile(r"^(auto|cpu|cuda)(?::(\d+))?$")


class DeviceUnavailable(RuntimeError):
    """The asked-for device cannot be used here; the message is one line naming what is missing."""


@dataclass(frozen=True, slots=True)
class Placement:
    """A resolved choice: the device the model's weights live on and their dtype."""

    device: torch.device
    dtype: torch.dtype

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def bf16(self) -> bool:
        import torch

        return self.dtype == torch.bfloat16

    def describe(self) -> str:
        """`cpu fp32`, `cuda:0 bf16 (NVIDIA H100 80GB HBM3)`: for logs and records."""
        precision = "bf16" if self.bf16 else "fp32"
        if not self.is_cuda:
            return f"{self.device} {precision}"
        import torch

        return f"{self.device} {precision} ({torch.cuda.get_device_name(self.device)})"

    def activate(self) -> None:
        """Make this placement's GPU the current CUDA device (nothing on the CPU)."""
        if self.is_cuda:
            import torch

            torch.cuda.set_device(self.device)

    def place(self, model: object) -> object:
        """Move a torch module to this device and cast its floating-point weights to this dtype."""
        mover = getattr(model, "to", None)
        if mover is None:
            raise TypeError(f"{type(model).__name__} is not a torch module")
        return mover(device=self.device, dtype=self.dtype)


def parse_device(text: str) -> tuple[str, int | None]:
    """`("cuda", 1)` for `cuda:1`; `ValueError` for anything outside auto|cpu|cuda|cuda:N."""
    match = _DEVICE.match(text.strip().lower())
    if match is None or (match.group(2) is not None and match.group(1) != "cuda"):
        raise ValueError(f"--device must be {DEVICE_HELP}; got {text!r}")
    index = match.group(2)
    return match.group(1), None if index is None else int(index)


def _why_no_cuda() -> str:
    import torch

    if torch.version.cuda is None:
        return f"this torch ({torch.__version__}) is a CPU-only build: install a CUDA build of torch"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    hint = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
    build = f"torch {torch.__version__} (CUDA {torch.version.cuda})"
    return f"{build} sees no usable GPU{hint}: no NVIDIA driver or no device"


def resolve(device: str = "auto", dtype: str = "auto") -> Placement:
    """The placement for a `--device` and `--dtype` pair, by the rules in the module docstring.

    Raises:
        ValueError: a malformed device or dtype.
        DeviceUnavailable: CUDA asked for and not usable here (one line, naming what is missing).
    """
    import torch

    kind, index = parse_device(device)
    if dtype not in ("auto", "fp32", "bf16"):
        raise ValueError(f"--dtype must be {DTYPE_HELP}; got {dtype!r}")
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cpu":
        return Placement(torch.device("cpu"), torch.bfloat16 if dtype == "bf16" else torch.float32)
    if not torch.cuda.is_available():
        raise DeviceUnavailable(f"--device {device} needs CUDA, and {_why_no_cuda()}")
    count = torch.cuda.device_count()
    chosen = torch.cuda.current_device() if index is None else index
    if chosen >= count:
        raise DeviceUnavailable(f"--device {device} asks for GPU {chosen}, and {count} GPU(s) are visible")
    placed = torch.device("cuda", chosen)
    if dtype == "bf16" and not torch.cuda.is_bf16_supported():
        raise DeviceUnavailable(f"--dtype bf16: {torch.cuda.get_device_name(placed)} has no bf16 support")
    wants_bf16 = dtype == "bf16" or (dtype == "auto" and torch.cuda.is_bf16_supported())
    return Placement(placed, torch.bfloat16 if wants_bf16 else torch.float32)


def resolve_or_exit(device: str, dtype: str) -> Placement:
    """`resolve` for scripts (the examples, the benchmarks): the placement, made current; or the refusal
    as one `error:` line on stderr and exit status 2. The CLI's commands use `cli.placement` instead."""
    try:
        placement = resolve(device, dtype)
    except (ValueError, DeviceUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    placement.activate()
    return placement
