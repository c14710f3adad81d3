"""The gym on a Ray cluster: replicas as Ray actors behind one HTTP entry point (`gym-server serve --ray`).

- `settings`: how many replicas, where they may run (Ray resources), when to scale;
- `replica`: the Ray actor that runs one `gym-server serve` process on its node;
- `upstream`: a keep-alive HTTP/1.1 connection pool to one replica;
- `pool`: the replicas' supervisor (health, replacement, lost sessions, scaling by live sessions);
- `router`: the entry point's ASGI app, pinning each session to the replica that created it.

Ray is an optional extra (`gym-server[ray]`): nothing here is imported unless `--ray` is given.
See docs/scale.md.
"""
