# The tests' stand-in for the official Python image (no registry is reachable from the test
# machines): a debootstrapped Debian (DEBIAN_IMAGE, imported by tests/support/docker.py) with
# the distribution's Python added with apt, as slim as the official image (the debootstrapped
# Debian carries debian:bookworm-slim's dpkg and apt settings). sandbox.Dockerfile adds its tools.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}

# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*

# Test plumbing, last so the layer above is reused when it changes: the host's CA bundle (its
# package clients may sit behind an intercepting proxy) and pip's settings pointing at it.
COPY host-ca.crt /usr/local/share/host-ca.crt
COPY pip.conf /etc/pip.conf
