"""Disk limit benchmark: what a sandbox's own filesystems cost its start and its end.

    sudo .venv/bin/python bench/disks.py [--runs 10] [--size 8GiB]

Prints one JSON object: medians and maxima of `Disks.attach` (two sparse images formatted
at once, then mounted through loop devices) and `Disks.detach` (unmounted, images removed),
and what an empty image takes on the host. Root only (mount). The machine's load is printed
too: on a busy machine the figures say more about the neighbours.
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
from control_plane.providers.process.disks import Disks  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--size", default="8GiB")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/disks.py mounts filesystems: run it as root")
    size = int(TypeAdapter(ByteSize).validate_python(args.size))
    attach, detach, on_host = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        disks = Disks(Path(tmp) / "disks", size)
        for i in range(args.runs):
            root = Path(tmp) / "sandboxes" / f"s{i}"
            started = time.perf_counter()
            disks.attach(f"s{i}", root)
            attach.append(time.perf_counter() - started)
            on_host.append(
                sum(image.stat().st_blocks * 512 for image, _, _ in disks.images_of(f"s{i}", root))
            )
            started = time.perf_counter()
            disks.detach(f"s{i}", root)
            detach.append(time.perf_counter() - started)

    def ms(values: list[float]) -> dict[str, float]:
        return {
            "median_ms": round(statistics.median(values) * 1000, 1),
            "max_ms": round(max(values) * 1000, 1),
        }

    print(
        json.dumps(
            {
                "runs": args.runs,
                "size": size,
                "attach": ms(attach),
                "detach": ms(detach),
                "empty_images_on_host_mib": round(statistics.median(on_host) / 2**20, 1),
                "load": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
