# A Swarm worker node for the tests: Debian's Docker engine in a container (docker-in-docker),
# on the debootstrapped test image (DEBIAN_IMAGE, tests/support/docker.py). No registry is
# reachable from the test machines, so nothing else is a base. With gVisor's runsc, which a test
# makes the daemon's default runtime (Swarm on gVisor, `Cluster.default_runtime`).
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}

# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends docker.io iptables runsc \
    && rm -rf /var/lib/apt/lists/*
