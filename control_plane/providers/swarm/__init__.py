"""Swarm sandboxes: one service each on a cluster, placed on its nodes, with a warm pool and
each node's fence.

`provider` is their lifecycle (`SwarmProvider`), built from `settings` (`SwarmSettings.of`);
`spec` builds and reads the service JSON without a call, `manager` makes the calls on a
manager, `startup` waits for a service coming up, `nodejobs` runs the short jobs only a node
can do, `pool` parks services for new sandboxes, `fence` fences the nodes' networks.
"""
