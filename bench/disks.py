"""Disk limit benchmark: what a sandbox's own filesystems cost its start and its end.

    sudo .venv/bin/python bench/disks.py [--runs 10] [--size 8GiB] [--docker IMAGE]

Prints one JSON object: medians and maxima of `Disks.attach` (two sparse images formatted
at once, then mounted through loop devices) and `Disks.detach` (unmounted, images removed),
and what an empty image takes on the host. With `--docker IMAGE`, also what the disk adds to a
Docker sandbox's volume: a container of IMAGE running `true` on a plain volume and on one that
binds the sandbox's filesystems (`docker.disks`), made, run and removed with its volume, the
two alternated. Root only (mount). The machine's load is printed too: on a busy machine the
figures say more about the neighbours.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pydantic import ByteSize, TypeAdapter

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from control_plane.providers.disks import Disks  # noqa: E402


def ms(values: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(values) * 1000, 1),
        "max_ms": round(max(values) * 1000, 1),
    }


def process(runs: int, size: int, tmp: Path) -> dict[str, object]:
    attach, detach, on_host = [], [], []
    disks = Disks(tmp / "disks", size)
    for i in range(runs):
        root = tmp / "sandboxes" / f"s{i}"
        started = time.perf_counter()
        disks.attach(f"s{i}", root)
        attach.append(time.perf_counter() - started)
        on_host.append(
            sum(image.stat().st_blocks * 512 for image, _, _ in disks.images_of(f"s{i}", root))
        )
        started = time.perf_counter()
        disks.detach(f"s{i}", root)
        detach.append(time.perf_counter() - started)
    return {
        "attach": ms(attach),
        "detach": ms(detach),
        "empty_images_on_host_mib": round(statistics.median(on_host) / 2**20, 1),
    }


def docker_volumes(runs: int, size: int, tmp: Path, image: str) -> dict[str, object]:
    """A container's start and end on a plain volume and on a disk-limited one."""
    import docker

    from control_plane.providers.docker.disks import VolumeDisks, ensure_volume, remove_volume

    client = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto")
    labels = {"agent-server.bench": "disks"}
    times: dict[str, dict[str, list[float]]] = {
        kind: {"start": [], "end": []} for kind in ("plain", "disk")
    }
    try:
        for i in range(runs):
            for kind, disks in (("plain", None), ("disk", VolumeDisks.at(tmp / "vd", size))):
                sandbox = f"bench{os.getpid()}x{i}{kind}"
                started = time.perf_counter()
                ensure_volume(client, disks, sandbox, labels)
                container = client.containers.run(
                    image,
                    ["true"],
                    entrypoint=[],
                    user="1000:1000",
                    labels=labels,
                    volumes={f"agent-sandbox-{sandbox}": {"bind": "/workspace", "mode": "rw"}},
                    detach=True,
                )
                container.wait()
                times[kind]["start"].append(time.perf_counter() - started)
                started = time.perf_counter()
                container.remove(force=True)
                remove_volume(client, disks, sandbox)
                times[kind]["end"].append(time.perf_counter() - started)
    finally:
        for container in client.containers.list(all=True, filters={"label": list(labels)}):
            container.remove(force=True)
        client.close()
    return {
        kind: {"create_run_true": ms(t["start"]), "remove": ms(t["end"])}
        for kind, t in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--size", default="8GiB")
    parser.add_argument("--docker", metavar="IMAGE", help="also a Docker volume's cost")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/disks.py mounts filesystems: run it as root")
    size = int(TypeAdapter(ByteSize).validate_python(args.size))
    with tempfile.TemporaryDirectory() as tmp:
        found: dict[str, object] = {"runs": args.runs, "size": size}
        found |= process(args.runs, size, Path(tmp))
        if args.docker:
            found["docker"] = docker_volumes(args.runs, size, Path(tmp), args.docker)
    found["load"] = os.getloadavg()[0]
    print(json.dumps(found))


if __name__ == "__main__":
    main()
