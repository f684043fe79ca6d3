"""Swarm sandboxes: one service each on a cluster, placed on its nodes, with a warm pool and
each node's fence."""
