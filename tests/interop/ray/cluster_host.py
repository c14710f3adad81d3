"""A real multi-node Ray cluster on loopback, held by Ray's own test utility (`ray.cluster_utils.Cluster`).

Runs under the gym's python (`GYM_INTEROP_PYTHON`, which has the `ray` extra), since Ray starts its
workers with the interpreter that starts the nodes and those workers run gym servers. The tests drive it
with one JSON command per stdin line and read one JSON answer per stdout line:

    {"add": {"num_cpus": 2, "resources": {...}}}  -> {"node_id": "..."}
    {"kill": "<node_id>"}                          -> {"killed": "<node_id>"}  (SIGKILL, no grace)
    {"shutdown": true}                             -> {"shutdown": true}
"""

from __future__ import annotations

import json
import sys

from ray.cluster_utils import Cluster

_OBJECT_STORE_BYTES = 80 * 1024 * 1024  # Ray's floor is 75 MiB; the gym puts nothing in it


def main() -> None:
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,  # the entry point's driver only: replicas need the workers' resources
            "object_store_memory": _OBJECT_STORE_BYTES,
            "include_dashboard": False,
            "node_ip_address": "127.0.0.1",
        },
    )
    nodes = {cluster.head_node.node_id: cluster.head_node}
    _answer({"address": cluster.address, "head": cluster.head_node.node_id})
    for line in sys.stdin:
        command = json.loads(line)
        if "add" in command:
            node = cluster.add_node(
                object_store_memory=_OBJECT_STORE_BYTES, node_ip_address="127.0.0.1", **command["add"]
            )
            cluster.wait_for_nodes()
            nodes[node.node_id] = node
            _answer({"node_id": node.node_id})
        elif "kill" in command:
            cluster.remove_node(nodes.pop(command["kill"]), allow_graceful=False)
            _answer({"killed": command["kill"]})
        else:
            break
    cluster.shutdown()
    _answer({"shutdown": True})


def _answer(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
