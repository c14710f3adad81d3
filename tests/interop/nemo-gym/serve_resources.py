"""One of nemo-gym's resources servers as its own process: `python serve_resources.py MODULE:CLASS PORT`.

What NeMo Gym's `run_webserver` does for a resources server, without the parts that need its head server
and a Ray cluster (neither is used by the servers run here): build the server from its config class,
`setup_webserver()` (its routes, its session middleware), the liveness route, its exception middleware,
then uvicorn on loopback.
"""

from __future__ import annotations

import importlib
import sys

import uvicorn
from nemo_gym.config_types import BaseServerConfig
from nemo_gym.server_utils import ServerClient
from omegaconf import OmegaConf


def main(target: str, port: int) -> None:
    module, _, name = target.partition(":")
    server_cls = getattr(importlib.import_module(module), name)
    config_cls = server_cls.model_fields["config"].annotation
    config = config_cls(name="gym_interop_resources", host="127.0.0.1", port=port, entrypoint="app.py")
    client = ServerClient(
        head_server_config=BaseServerConfig(host="127.0.0.1", port=1), global_config_dict=OmegaConf.create({})
    )
    server = server_cls(config=config, server_client=client)
    app = server.setup_webserver()
    server.setup_liveness(app)
    server.setup_exception_middleware(app)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
