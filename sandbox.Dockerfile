# The sandbox image the control plane starts: the agent server, a shell, git, ripgrep, Chromium.
#   make image        (docker build -f sandbox.Dockerfile -t agent-server .)
#   docker run -p 127.0.0.1::8000 -e SESSION_API_KEY=... -v agent-workspace:/workspace agent-server
# Any Debian-based image with python3 (3.11+) and its venv module is a base: the official slim
# Python image by default, or a distribution Python (`--build-arg BASE_IMAGE=...` with
# python3 and python3-venv installed). The server lives in its own virtual environment, so it
# never touches the base's Python packages.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

# Packages beyond the server's own needs: Chromium for the browser tool (about 300 MB). An
# image for sandboxes that never browse can leave it out with `--build-arg EXTRA_PACKAGES=`.
ARG EXTRA_PACKAGES=chromium

# hadolint ignore=DL3008,SC2086
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        bash ca-certificates git ripgrep tini $EXTRA_PACKAGES \
    && rm -rf /var/lib/apt/lists/*

# The workspace is /workspace/project, where OpenHands clients expect it; the server's state is
# beside it on the same volume (/workspace), as the control plane mounts each sandbox's.
RUN useradd --create-home --uid 1000 --shell /bin/bash agent \
    && mkdir -p /workspace/project /workspace/.agent-server \
    && chown agent:agent /workspace /workspace/project /workspace/.agent-server

# The dependencies first, from pyproject.toml alone: a change to the server's code reuses this
# layer (Docker's cache), so a rebuild installs one package, not a hundred.
WORKDIR /opt/agent-server
ENV VIRTUAL_ENV=/opt/agent-server/venv
ENV PATH=/opt/agent-server/venv/bin:$PATH
COPY pyproject.toml ./
RUN python3 -m venv "$VIRTUAL_ENV" \
    && python3 -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > requirements.txt \
    && pip install --no-cache-dir -r requirements.txt \
    && rm -rf /root/.cache

COPY README.md ./
COPY core ./core
COPY agent_server ./agent_server
COPY tools ./tools
COPY events ./events
COPY web ./web
RUN pip install --no-cache-dir --no-deps . && rm -rf /root/.cache build ./*.egg-info

ENV AGENT_SERVER_HOST=0.0.0.0 \
    AGENT_SERVER_PORT=8000 \
    AGENT_SERVER_STATE_DIR=/workspace/.agent-server \
    AGENT_SERVER_WORKING_DIR=/workspace/project \
    AGENT_SERVER_CHROMIUM=/usr/bin/chromium \
    PYTHONUNBUFFERED=1
# Set at `docker run`: AGENT_SERVER_WEBHOOK_URL, and the keys: SESSION_API_KEY (required off
# loopback), AGENT_SERVER_WEBHOOK_API_KEY, AGENT_SERVER_WEBHOOK_SECRET. The control plane hands
# the keys over stdin instead (AGENT_SERVER_KEYS_FD=0, a JSON object), so that no process of the
# container finds them in tini's environment; it also runs the image with a read-only root
# (tmpfs on /tmp and /home/agent), every capability dropped and no-new-privileges.

USER 1000:1000
WORKDIR /workspace/project
VOLUME ["/workspace"]
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2)"]
# tini reaps what killed shells leave behind (the server would otherwise be PID 1).
# The state directory is AGENT_SERVER_STATE_DIR's (the control plane puts it on its volume).
ENTRYPOINT ["tini", "--", "agent-server", "--host", "0.0.0.0", "--port", "8000"]
