"""An OpenAI-compatible endpoint over a model object already in memory (the trainer's own), on loopback.

A user's agent talks to an OpenAI-compatible URL; on a CPU without vLLM the samples must still come from
the weights being trained, so this serves `trainer.model` in-process with the bundled policy server
(`gym-server policy serve`'s app: token ids and logprobs in vLLM's fields) on a thread of its own. The
model object is shared, not copied: every request samples the current weights. TRL calls `rollout_func`
between optimizer steps, so sampling and training never run at once.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

__all__ = ["ServedPolicy"]


class ServedPolicy:
    """`create_policy_app(model, tokenizer)` under uvicorn on `127.0.0.1:<free port>`, in a daemon thread.

    ```python
    with ServedPolicy(model, tokenizer, name="tiny") as policy:
        policy.base_url  # "http://127.0.0.1:41234/v1"
    ```
    """

    def __init__(self, model: Any, tokenizer: Any, *, name: str = "policy", max_batch: int = 32) -> None:
        import uvicorn

        from gym_trainer.policy_server import create_policy_app

        self.name = name
        self.app = create_policy_app(model, tokenizer, name=name, max_batch=max_batch)
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self.port = int(self._socket.getsockname()[1])
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="served-policy", daemon=True
        )

    def __repr__(self) -> str:
        return f"ServedPolicy({self.base_url!r}, name={self.name!r})"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (ends in `/v1`)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout_s: float = 30.0) -> ServedPolicy:
        """Start serving; returns once the server accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the in-process policy server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Stop serving and the policy's generation thread (the model is left alone)."""
        if self._thread.is_alive():
            self._server.should_exit = True
            self._thread.join(timeout=10)
        self.app.state.policy.engine.stop()
        self._socket.close()

    def __enter__(self) -> ServedPolicy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
