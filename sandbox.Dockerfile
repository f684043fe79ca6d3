# The sandbox image the control plane starts: the agent server, a shell, git, ripgrep, Chromium.
#   make image        (docker build -f sandbox.Dockerfile -t agent-server .)
#   docker run -p 127.0.0.1::8000 -e SESSION_API_KEY=... -v agent-workspace:/workspace agent-server
# Any Debian-based image with python3 (3.11+) and its venv module is a base: the official slim
# Python image by default, or a distribution Python (`--build-arg BASE_IMAGE=...` with
# python3 and python3-venv installed). The server lives in its own virtual environment, so it
# never touches the base's Python packages.
#
# Two stages on the same base (a virtual environment names its interpreter by path): `build`
# installs the server into /opt/agent-server/venv with whatever that takes; the image is the
# base, the runtime packages and that directory alone, so no compiler, cache or wheel of the
# build reaches it. What a server loads is compiled there (agent_server/precompile.py), so a
# start compiles nothing.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE} AS build

# binutils for strip: Playwright's Node and some extensions ship their debugging symbols.
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends binutils \
    && rm -rf /var/lib/apt/lists/*

# The dependencies first, from pyproject.toml alone: a change to the server's code reuses this
# layer (Docker's cache), so a rebuild installs one package, not a hundred. The control
# plane's own dependencies stay out (no module of the server imports them: the test of this
# file checks it). litellm's proxy server's web console, API pages and OpenAPI snapshot are
# never served, nor Playwright's (its trace viewer, reports and recorder: the browser tool only
# writes traces); tests, type stubs and debugging symbols (30 MB in Playwright's Node alone) are
# never read. Nor does a server run litellm's Rust extension (38 MB): litellm's own routing
# (rust_bridge/catalog.py) sends chat completions, responses, messages, embeddings and token
# counting to Python unless LITELLM_RUST opts in, and falls back to Python when the extension
# is missing; only OCR and Bedrock transcription require it. hf_xet is huggingface_hub's
# optional Xet downloader (it downloads over plain HTTP without it). Of botocore's service
# models (20 MB), only those of services litellm, boto3 or botocore name, and Bedrock's and
# SageMaker's, stay: a client of any other is never made.
WORKDIR /opt/agent-server
ENV VIRTUAL_ENV=/opt/agent-server/venv
ENV PATH=/opt/agent-server/venv/bin:$PATH
ENV PYTHONDONTWRITEBYTECODE=1
ARG CONTROL_PLANE_ONLY="sqlalchemy alembic aiosqlite asyncpg cryptography docker"
COPY pyproject.toml ./
RUN python3 -m venv "$VIRTUAL_ENV" \
    && python3 -c "import re, sys, tomllib; skip = set(sys.argv[1].split()); deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; print('\n'.join(d for d in deps if re.split(r'[^A-Za-z0-9_.-]', d)[0].lower() not in skip))" "$CONTROL_PLANE_ONLY" > requirements.txt \
    && pip install --no-cache-dir --no-compile -r requirements.txt \
    && site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    && rm -rf "$site/litellm/proxy/_experimental/out" "$site/litellm/proxy/swagger" \
        "$site/litellm/proxy/_lazy_openapi_snapshot.json" "$site"/litellm/rust_bridge/_native*.so \
    && pip uninstall -y -q hf-xet \
    && python3 -c "import pathlib, re, shutil, sys; data = pathlib.Path(sys.argv[1], 'botocore/data'); models = {p.name for p in data.iterdir() if p.is_dir()}; named = {m for pkg in sys.argv[2:] for f in pathlib.Path(sys.argv[1], pkg).rglob('*.py') for m in re.findall(r'[\x27\x22]([a-z0-9][a-z0-9-]*)[\x27\x22]', f.read_text(errors='replace'))}; [shutil.rmtree(data / n) for n in models - named if not n.startswith(('bedrock', 'sagemaker'))]" "$site" litellm boto3 botocore s3transfer \
    && find "$VIRTUAL_ENV" -depth \( -name __pycache__ -o -name tests \) -type d -exec rm -rf {} + \
    && find "$VIRTUAL_ENV" -name '*.pyi' -type f -delete \
    && find "$VIRTUAL_ENV" -type f \( -name '*.so' -o -name '*.so.*' \) -exec strip --strip-unneeded {} + \
    && strip --strip-all "$site/playwright/driver/node" \
    && rm -rf "$site/playwright/driver/package/types" "$site/playwright/driver/package/lib/vite"

# Then the server, without pip and setuptools (they serve installs only), and the bytecode of
# what a server loads (agent_server/precompile.py says why not of everything), imported from
# the environment (-P: not from the sources beside it).
COPY README.md cli.py ./
COPY core ./core
COPY launch ./launch
COPY agent_server ./agent_server
COPY tools ./tools
COPY events ./events
COPY web ./web
# A swarm node's fence runs from this image too (`python -m control_plane.network.node`: the
# sandboxes' network boundary on their node); of the control plane, that package alone.
COPY control_plane/__init__.py ./control_plane/__init__.py
COPY control_plane/network ./control_plane/network
RUN pip install --no-cache-dir --no-compile --no-deps . \
    && pip uninstall -y -q pip setuptools \
    && python -P -m agent_server.precompile

# The image: the base with the runtime packages and the virtual environment, nothing else.
FROM ${BASE_IMAGE}

# Packages beyond the server's own needs: Chromium for the browser tool, always headless, so
# Debian's headless shell (chromium-headless-shell: the browser without its windows, about
# 280 MB with its libraries, 170 MB less than `chromium`). An image for sandboxes that never
# browse can leave it out with `--build-arg EXTRA_PACKAGES=`; one with the full browser sets
# `EXTRA_PACKAGES=chromium HEADLESS_EXCLUDES=` and AGENT_SERVER_CHROMIUM=/usr/bin/chromium.
ARG EXTRA_PACKAGES=chromium-headless-shell

# Documentation, manuals and translations are never read in a sandbox: dpkg leaves them out
# (copyright files stay), as Debian's slim images do; apt's lists and caches go with the layer.
# Nor does the headless shell load what its packages bring for a desktop (HEADLESS_EXCLUDES): it
# draws with its own SwiftShader and ANGLE, never with Mesa's DRI drivers, the LLVM and Z3 they
# JIT with or the XML and ICU libraries LLVM pulls in (220 MB; nothing else here links them),
# nor Vulkan's validation layer and mock driver, GTK's icons, the full browser's resource packs
# (it reads headless_lib_*.pak instead), X11's keyboard maps and input-method tables (5 MB:
# it never opens a display; Playwright types through the DevTools protocol), or the crash
# reporter's handler (no crash dump is ever collected from a sandbox). An image whose
# EXTRA_PACKAGES need those builds with `--build-arg HEADLESS_EXCLUDES=`. libatomic1 is
# Playwright's Node's (the browser tool's driver: without it no browser starts).
ARG HEADLESS_EXCLUDES="/usr/lib/*/dri/* /usr/lib/*/libLLVM-* /usr/lib/*/libz3.so* /usr/lib/*/libxml2.so* /usr/lib/*/libicu*.so* /usr/lib/chromium/libVkLayer_khronos_validation.so /usr/lib/chromium/libVkICD_mock_icd.so* /usr/lib/chromium/resources.pak /usr/lib/chromium/chrome_*_percent.pak /usr/lib/chromium/locales/* /usr/share/icons/Adwaita/*/* /usr/share/X11/xkb/* /usr/share/X11/locale/* /usr/lib/chromium/chrome_crashpad_handler"
# Of git, a sandbox runs the client: not what serves repositories (daemon, http-backend, shell,
# gitweb, instaweb) or mails patches (imap-send), nor WebDAV push (11 MB). Of the Perl it
# depends on, neither the C headers for building Perl extensions (no compiler here) nor
# Encode's Chinese, Japanese and Korean tables (17 MB), nor libperl (the `perl` on PATH is
# perl-base's, which does not link it), Unicode::Collate's tables, Module::CoreList, the
# debugger or Devel::PPPort (11 MB; Perl, its other modules and UTF-8 stay). An
# image that needs them builds with `--build-arg GIT_EXCLUDES=`. tini-static: tini is the
# init. The copies of git and scalar in git-core become hard links to /usr/bin's (the same
# bytes, stored once); apt's and debconf's backups of their databases go.
ARG GIT_EXCLUDES="/usr/lib/git-core/git-daemon /usr/lib/git-core/git-http-backend /usr/lib/git-core/git-http-push /usr/lib/git-core/git-imap-send /usr/lib/git-core/git-instaweb /usr/lib/git-core/git-shell /usr/bin/git-shell /usr/share/gitweb/* /usr/lib/*/perl/5.*/CORE/* /usr/lib/*/perl/5.*/auto/Encode/CN/* /usr/lib/*/perl/5.*/auto/Encode/JP/* /usr/lib/*/perl/5.*/auto/Encode/KR/* /usr/lib/*/perl/5.*/auto/Encode/TW/* /usr/lib/*/libperl.so.5* /usr/bin/perl5.*-* /usr/share/perl/5.*/Unicode/Collate/* /usr/share/perl/5.*/Unicode/Collate.pm /usr/lib/*/perl/5.*/Unicode/Collate.pm /usr/lib/*/perl/5.*/Unicode/Collate/* /usr/lib/*/perl/5.*/auto/Unicode/Collate/* /usr/share/perl/5.*/Module/CoreList.pm /usr/share/perl/5.*/Module/CoreList/* /usr/bin/corelist /usr/share/perl/5.*/perl5db.pl /usr/lib/*/perl/5.*/Devel/PPPort.pm /usr/bin/tini-static"
# hadolint ignore=DL3008,SC2086
RUN printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
        'path-exclude /usr/share/man/*' 'path-exclude /usr/share/groff/*' \
        'path-exclude /usr/share/info/*' 'path-exclude /usr/share/lintian/*' \
        'path-exclude /usr/share/locale/*' > /etc/dpkg/dpkg.cfg.d/sandbox-slim \
    && (set -f; for path in $HEADLESS_EXCLUDES $GIT_EXCLUDES; do echo "path-exclude $path"; done) >> /etc/dpkg/dpkg.cfg.d/sandbox-slim \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        bash ca-certificates git ripgrep tini libatomic1 nftables iproute2 $EXTRA_PACKAGES \
    && apt-get clean \
    && for tool in git scalar; do \
        if cmp -s "/usr/bin/$tool" "/usr/lib/git-core/$tool"; then ln -f "/usr/bin/$tool" "/usr/lib/git-core/$tool"; fi; \
    done \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
        /var/cache/debconf/*-old /var/lib/dpkg/*-old

# The workspace is /workspace/project, where OpenHands clients expect it; the server's state is
# beside it on the same volume (/workspace), as the control plane mounts each sandbox's.
RUN useradd --create-home --uid 1000 --shell /bin/bash agent \
    && mkdir -p /workspace/project /workspace/.agent-server \
    && chown agent:agent /workspace /workspace/project /workspace/.agent-server

ENV VIRTUAL_ENV=/opt/agent-server/venv
ENV PATH=/opt/agent-server/venv/bin:$PATH
COPY --from=build /opt/agent-server/venv /opt/agent-server/venv

# PYTHONDONTWRITEBYTECODE: everything is compiled already, and the root is read-only.
ENV AGENT_SERVER_HOST=0.0.0.0 \
    AGENT_SERVER_PORT=8000 \
    AGENT_SERVER_STATE_DIR=/workspace/.agent-server \
    AGENT_SERVER_WORKING_DIR=/workspace/project \
    AGENT_SERVER_CHROMIUM=/usr/bin/chromium-headless-shell \
    PYTHONDONTWRITEBYTECODE=1 \
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
