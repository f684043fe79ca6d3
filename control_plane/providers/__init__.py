"""The kinds of sandbox, each a wing of its own behind the seam `control_plane.sandboxes.provider`.

    providers/
      process/     a sandbox as processes of this host: bubblewrap or gVisor, cgroups, the
                   fork template, its own filesystem (provider, isolation, gvisor, spawn,
                   cgroups, seccomp, template, disks)
      containers.py  what the container kinds share: names, labels, the launch environment,
                   the keys on a held stdin
      disks.py     a sandbox's own filesystems (its disk limit): a process sandbox's directory,
                   a Docker sandbox's volume (`docker/disks.py` binds them)
      pool.py      the warm pool both container kinds park started sandboxes in
      docker/      a sandbox as a container of one Docker engine (provider, pool, network)
      swarm/       a sandbox as a Swarm service (provider, spec, manager, pool, fence,
                   nodejobs)

No wing imports another kind's (`tests/test_layers.py`); the sandbox domain
(`control_plane.sandboxes`) knows only the seam, and the composition root
(`control_plane.services`) picks the kind. Only these modules import the Docker SDK.
"""
