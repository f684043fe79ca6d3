# The sandbox image the control plane starts: the agent server, a shell, git, ripgrep, Chromium.
#   docker build -f sandbox.Dockerfile -t agent-server .
#   docker run -p 8000:8000 -e SESSION_API_KEY=... -v agent-state:/var/lib/agent-server agent-server
FROM python:3.11-slim-bookworm

# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends bash ca-certificates chromium git ripgrep tini \
    && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 1000 --shell /bin/bash agent \
    && mkdir -p /workspace /var/lib/agent-server \
    && chown agent:agent /workspace /var/lib/agent-server

WORKDIR /opt/agent-server
COPY pyproject.toml README.md ./
COPY agent_server ./agent_server
COPY tools ./tools
RUN pip install --no-cache-dir . && rm -rf /root/.cache

ENV AGENT_SERVER_HOST=0.0.0.0 \
    AGENT_SERVER_PORT=8000 \
    AGENT_SERVER_STATE_DIR=/var/lib/agent-server \
    AGENT_SERVER_WORKING_DIR=/workspace \
    AGENT_SERVER_CHROMIUM=/usr/bin/chromium \
    PYTHONUNBUFFERED=1
# Set by the control plane at `docker run`: SESSION_API_KEY (required off loopback),
# AGENT_SERVER_WEBHOOK_URL, AGENT_SERVER_WEBHOOK_API_KEY, AGENT_SERVER_WEBHOOK_SECRET.

USER 1000:1000
WORKDIR /workspace
VOLUME ["/var/lib/agent-server"]
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2)"]
# tini reaps what killed shells leave behind (the server would otherwise be PID 1).
ENTRYPOINT ["tini", "--", "agent-server", "--host", "0.0.0.0", "--port", "8000", "--state-dir", "/var/lib/agent-server"]
