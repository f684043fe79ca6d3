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
# models (20 MB), only those of services litellm names, Bedrock's and SageMaker's, and those
# botocore's own credential providers call (STS, SSO, sign-in) stay: a client of any other is
# never made (what boto3 and botocore say of EC2, Route 53 and others customizes those clients
# alone: 4.5 MB). Of litellm, the modules that cannot be imported here stay out (494, 13 MB,
# nearly all of its proxy server's): each is tried, and goes only when what it lacks, directly
# or behind the error it raised, is a package that is not installed (FastAPI above all, the
# `litellm[proxy]` extra; no pip is left to add one), with the folders left without a module
# (their data only those modules read); every module that imports still does. botocore's
# remaining JSON (its endpoints, 1.3 MB) is gzipped, as most of its models ship: its loader
# reads .json.gz alike. Cython's sources, C/C++ headers and jsonschema's benchmarks go too:
# nothing compiles or benchmarks here.
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
    && python3 -c "import pathlib, re, shutil, sys; data = pathlib.Path(sys.argv[1], 'botocore/data'); models = {p.name for p in data.iterdir() if p.is_dir()}; named = {m for pkg in sys.argv[2:] for f in pathlib.Path(sys.argv[1], pkg).rglob('*.py') for m in re.findall(r'[\x27\x22]([a-z0-9][a-z0-9-]*)[\x27\x22]', f.read_text(errors='replace'))}; [shutil.rmtree(data / n) for n in models - named if not n.startswith(('bedrock', 'sagemaker', 'sts', 'sso', 'signin'))]" "$site" litellm \
    && printf '%s\n' 'import importlib, importlib.util, pathlib, shutil, sys' \
        'site = pathlib.Path(sys.argv[1]); dead = []' \
        'def lacks(error):  # a package that is not installed, in the chain of what failed' \
        '    while error is not None:' \
        '        if isinstance(error, ModuleNotFoundError) and importlib.util.find_spec((error.name or "litellm").partition(".")[0]) is None: return True' \
        '        error = error.__cause__ or error.__context__' \
        'for path in sorted(p for p in site.joinpath("litellm").rglob("*.py") if p.stem != "__main__"):' \
        '    try: importlib.import_module(".".join(path.relative_to(site).with_suffix("").parts).removesuffix(".__init__"))' \
        '    except BaseException as error:' \
        '        if lacks(error): dead.append(path)' \
        '[path.unlink() for path in dead]' \
        'folders = {folder for path in dead for folder in path.parents if folder.is_relative_to(site / "litellm") and folder != site / "litellm"}' \
        '[shutil.rmtree(f) for f in sorted(folders, reverse=True) if f.exists() and not any(f.rglob("*.py"))]' \
        'print(f"litellm: {len(dead)} modules that cannot be imported here left out", file=sys.stderr)' \
        > /tmp/prune-litellm.py \
    && LITELLM_LOCAL_MODEL_COST_MAP=True python3 /tmp/prune-litellm.py "$site" \
    && find "$site/botocore/data" -name '*.json' -exec gzip -9n {} + \
    && rm -rf "$site/jsonschema/benchmarks" \
    && find "$VIRTUAL_ENV" -depth \( -name __pycache__ -o -name tests \) -type d -exec rm -rf {} + \
    && find "$VIRTUAL_ENV" -type f \( -name '*.pyi' -o -name '*.pyx' -o -name '*.pxd' -o -name '*.pxi' -o -name '*.h' -o -name '*.hpp' -o -name '*.cpp' \) -delete \
    && find "$VIRTUAL_ENV" -type f \( -name '*.so' -o -name '*.so.*' \) -exec strip --strip-unneeded {} + \
    && strip --strip-all "$site/playwright/driver/node" \
    && rm -rf "$site/playwright/driver/package/types" "$site/playwright/driver/package/lib/vite"

# Then the server, without pip and setuptools (they serve installs only), the packages'
# metadata without its long descriptions (0.9 MB of READMEs after the headers: name, version,
# requirements and entry points stay, all that importlib.metadata and scanners read), and the
# bytecode of what a server loads (agent_server/precompile.py says why not of everything),
# imported from the environment (-P: not from the sources beside it).
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
    && python3 -c "import pathlib, sys; [m.write_bytes(m.read_bytes().partition(b'\n\n')[0] + b'\n') for m in pathlib.Path(sys.argv[1]).glob('lib/python3*/site-packages/*.dist-info/METADATA')]" "$VIRTUAL_ENV" \
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
# reporter's handler (no crash dump is ever collected from a sandbox) or the build's tables of
# contents (*.TOC: ninja's, never read at run time), nor Mesa's GLX and the GPU drivers'
# libdrm helpers (2.6 MB: its WebGL is ANGLE on SwiftShader, in /usr/lib/chromium), nor
# Brotli's encoder or NSS's SSL library (1 MB: it only decodes Brotli and speaks TLS with its
# own BoringSSL; nothing links either), nor the X11 utilities a desktop browser brings
# (xdpyinfo, xprop, xwininfo..., with the Xaw, Xt, Xmu, Xpm and xkbfile libraries only they
# link: 2.2 MB). An image whose EXTRA_PACKAGES need those builds with
# `--build-arg HEADLESS_EXCLUDES=`. libatomic1 is Playwright's Node's (the browser tool's
# driver: without it no browser starts).
ARG HEADLESS_EXCLUDES="/usr/lib/*/dri/* /usr/lib/*/libLLVM-* /usr/lib/*/libz3.so* /usr/lib/*/libxml2.so* /usr/lib/*/libicu*.so* /usr/lib/chromium/libVkLayer_khronos_validation.so /usr/lib/chromium/libVkICD_mock_icd.so* /usr/lib/chromium/resources.pak /usr/lib/chromium/chrome_*_percent.pak /usr/lib/chromium/locales/* /usr/share/icons/Adwaita/*/* /usr/share/X11/xkb/* /usr/share/X11/locale/* /usr/lib/chromium/chrome_crashpad_handler /usr/lib/chromium/*.TOC /usr/lib/*/libGL.so.* /usr/lib/*/libGLX.so.* /usr/lib/*/libGLX_mesa.so.* /usr/lib/*/libGLdispatch.so.* /usr/lib/*/libglapi.so.* /usr/lib/*/libxcb-glx.so.* /usr/lib/*/libdrm_intel.so.* /usr/lib/*/libdrm_radeon.so.* /usr/lib/*/libdrm_amdgpu.so.* /usr/lib/*/libdrm_nouveau.so.* /usr/lib/*/libpciaccess.so.* /usr/lib/*/libsensors.so.* /usr/lib/*/libbrotlienc.so.* /usr/lib/*/libssl3.so /usr/bin/appres /usr/bin/editres /usr/bin/listres /usr/bin/luit /usr/bin/viewres /usr/bin/xdpyinfo /usr/bin/xdriinfo /usr/bin/xev /usr/bin/xfd /usr/bin/xfontsel /usr/bin/xkill /usr/bin/xlsatoms /usr/bin/xlsclients /usr/bin/xlsfonts /usr/bin/xmessage /usr/bin/xprop /usr/bin/xvinfo /usr/bin/xwininfo /etc/X11/app-defaults/* /usr/lib/*/libXaw.so.* /usr/lib/*/libXaw7.so.* /usr/lib/*/libXt.so.* /usr/lib/*/libXmu.so.* /usr/lib/*/libXmuu.so.* /usr/lib/*/libXpm.so.* /usr/lib/*/libxkbfile.so.* /usr/lib/*/libXxf86dga.so.* /usr/lib/*/libXv.so.* /usr/lib/*/libXft.so.* /usr/lib/*/libICE.so.* /usr/lib/*/libSM.so.* /usr/lib/*/libfontenc.so.*"
# Of git, a sandbox runs the client: not what serves repositories (daemon, http-backend, shell,
# gitweb, instaweb) or mails patches (imap-send), nor WebDAV push (11 MB), nor http-fetch (2.2
# MB: git runs it only for the packfile URIs a client asks for with fetch.uriProtocols, unset),
# nor scalar (2.2 MB: it registers huge repositories for background maintenance by cron or
# systemd, neither of which a sandbox has). Of the Perl it depends on, neither the C headers
# for building Perl extensions nor Encode's Chinese, Japanese and Korean tables (17 MB), nor
# libperl (the `perl` on PATH is perl-base's, which does not link it), Unicode::Collate's
# tables, Module::CoreList, the debugger or Devel::PPPort (11 MB), nor the modules'
# documentation (.pod files; perldiag.pod, which `use diagnostics` reads, stays), nor CPAN's
# client, ExtUtils' MakeMaker, xsubpp and h2xs and the cross-building configuration (2 MB:
# they build and install modules with make and a C compiler, and the image has neither), nor
# the copies of modules perl-base already has (4 MB: its folder comes first in @INC, so these
# are never loaded); Perl, its other modules and UTF-8 stay. An image that needs them builds
# with `--build-arg GIT_EXCLUDES=`. tini-static: tini is the init. The copy of git in git-core
# becomes a hard link to /usr/bin's (the same bytes, stored once); apt's and debconf's backups
# of their databases go, and so do the libraries' symbol files in dpkg's database (1 MB:
# dpkg-shlibdeps reads them when building packages, nothing else ever does).
ARG GIT_EXCLUDES="/usr/lib/git-core/git-daemon /usr/lib/git-core/git-http-backend /usr/lib/git-core/git-http-fetch /usr/lib/git-core/git-http-push /usr/lib/git-core/git-imap-send /usr/lib/git-core/git-instaweb /usr/lib/git-core/git-shell /usr/bin/git-shell /usr/lib/git-core/scalar /usr/bin/scalar /usr/share/gitweb/* /usr/lib/*/perl/5.*/CORE/* /usr/lib/*/perl/5.*/auto/Encode/CN/* /usr/lib/*/perl/5.*/auto/Encode/JP/* /usr/lib/*/perl/5.*/auto/Encode/KR/* /usr/lib/*/perl/5.*/auto/Encode/TW/* /usr/lib/*/libperl.so.5* /usr/bin/perl5.*-* /usr/share/perl/5.*/Unicode/Collate/* /usr/share/perl/5.*/Unicode/Collate.pm /usr/lib/*/perl/5.*/Unicode/Collate.pm /usr/lib/*/perl/5.*/Unicode/Collate/* /usr/lib/*/perl/5.*/auto/Unicode/Collate/* /usr/share/perl/5.*/Module/CoreList.pm /usr/share/perl/5.*/Module/CoreList/* /usr/bin/corelist /usr/share/perl/5.*/perl5db.pl /usr/lib/*/perl/5.*/Devel/PPPort.pm /usr/share/perl/5.*/[A-Z]*.pod /usr/lib/*/perl/5.*/[A-Z]*.pod /usr/share/perl/5.*/CPAN.pm /usr/share/perl/5.*/CPAN/* /usr/bin/cpan /usr/bin/cpan5.*-* /usr/share/perl/5.*/ExtUtils/* /usr/bin/instmodsh /usr/bin/xsubpp /usr/bin/h2xs /usr/lib/*/perl/cross-config-5.*/* /usr/bin/tini-static"
# Of iproute2, `ip` (the fence's) and `ss` stay: tc, devlink, bridge, rdma, tipc and the like
# (2.3 MB) administer the kernel's network with capabilities a sandbox never has (every one is
# dropped). An image that needs them builds with `--build-arg NET_EXCLUDES=`.
ARG NET_EXCLUDES="/sbin/tc /usr/lib/*/tc/* /sbin/devlink /sbin/dcb /sbin/vdpa /sbin/tipc /sbin/bridge /sbin/rtmon /sbin/rtacct /usr/bin/rdma /usr/bin/nstat /usr/bin/lnstat /usr/bin/ctstat /usr/bin/rtstat /usr/bin/routel /usr/sbin/arpd /usr/sbin/genl /usr/share/bash-completion/completions/tc /usr/share/bash-completion/completions/devlink"
# hadolint ignore=DL3008,SC2086
RUN printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
        'path-exclude /usr/share/man/*' 'path-exclude /usr/share/groff/*' \
        'path-exclude /usr/share/info/*' 'path-exclude /usr/share/lintian/*' \
        'path-exclude /usr/share/locale/*' > /etc/dpkg/dpkg.cfg.d/sandbox-slim \
    && (set -f; for path in $HEADLESS_EXCLUDES $GIT_EXCLUDES $NET_EXCLUDES; do echo "path-exclude $path"; done) >> /etc/dpkg/dpkg.cfg.d/sandbox-slim \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        bash ca-certificates git ripgrep tini libatomic1 nftables iproute2 $EXTRA_PACKAGES \
    && apt-get clean \
    && if cmp -s /usr/bin/git /usr/lib/git-core/git; then ln -f /usr/bin/git /usr/lib/git-core/git; fi \
    && find /usr/lib/*/perl-base -type f -exec sh -c 'for f; do f="${f#*/perl-base/}"; rm -f /usr/lib/*/perl/5.*/"$f" /usr/share/perl/5.*/"$f"; done' sh {} + \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
        /var/cache/debconf/*-old /var/lib/dpkg/*-old /var/lib/dpkg/info/*.symbols

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
