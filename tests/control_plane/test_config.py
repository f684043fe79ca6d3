"""Config: read in one place, a flag over its CONTROL_PLANE_* variable, plain database URLs
given their async drivers, bad values refused with the setting named."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from control_plane.config import VARIABLES, from_env


def test_flags_override_variables(tmp_path: Path) -> None:
    env = {
        "CONTROL_PLANE_PORT": "4000",
        "CONTROL_PLANE_HOST": "127.0.0.2",
        "CONTROL_PLANE_STATE_DIR": str(tmp_path),
        "CONTROL_PLANE_MAX_CONVERSATIONS_PER_SANDBOX": "3",
        "CONTROL_PLANE_LOG_LEVEL": "",
    }
    config = from_env(env, port=5000)
    assert (config.host, config.port, config.max_conversations_per_sandbox) == (
        "127.0.0.2",
        5000,
        3,
    )
    assert config.log_level == "info"  # empty counts as unset
    assert config.db_url == f"sqlite+aiosqlite:///{tmp_path / 'control-plane.db'}"
    assert config.webhook_base == "http://127.0.0.2:5000/api/v1/webhooks"
    assert (
        from_env(env, public_url="http://cp.internal:80/").webhook_base
        == "http://cp.internal:80/api/v1/webhooks"
    )
    assert set(VARIABLES.values()) >= {"CONTROL_PLANE_DATABASE_URL", "CONTROL_PLANE_SECRET_KEY"}


def test_database_urls_get_async_drivers() -> None:
    assert (
        from_env({"CONTROL_PLANE_DATABASE_URL": "postgresql://u@h:5/db"}).db_url
        == "postgresql+asyncpg://u@h:5/db"
    )
    assert (
        from_env({"CONTROL_PLANE_DATABASE_URL": "postgres://u@h/db"}).db_url
        == "postgresql+asyncpg://u@h/db"
    )
    assert (
        from_env({"CONTROL_PLANE_DATABASE_URL": "sqlite:////x/y.db"}).db_url
        == "sqlite+aiosqlite:////x/y.db"
    )


def test_bad_values_name_the_setting() -> None:
    with pytest.raises(ValidationError, match="port"):
        from_env({"CONTROL_PLANE_PORT": "70000"})
    with pytest.raises(ValidationError, match="max_conversations_per_sandbox"):
        from_env({"CONTROL_PLANE_MAX_CONVERSATIONS_PER_SANDBOX": "0"})
    with pytest.raises(ValidationError, match="sandbox_disk_limit"):
        from_env({"CONTROL_PLANE_SANDBOX_DISK_LIMIT": "1MiB"})  # no room for ext4's own
    assert from_env({"CONTROL_PLANE_SANDBOX_DISK_LIMIT": "0"}).sandbox_disk_limit == 0


def test_the_docker_provider_needs_a_listener_its_containers_reach() -> None:
    with pytest.raises(ValidationError, match="CONTROL_PLANE_HOST"):
        from_env({"CONTROL_PLANE_SANDBOX_PROVIDER": "docker"})
    assert (
        from_env(
            {"CONTROL_PLANE_SANDBOX_PROVIDER": "docker", "CONTROL_PLANE_HOST": "0.0.0.0"}
        ).sandbox_provider
        == "docker"
    )
    assert (
        from_env(
            {
                "CONTROL_PLANE_SANDBOX_PROVIDER": "docker",
                "CONTROL_PLANE_PUBLIC_URL": "http://cp.internal:3000",
            }
        ).sandbox_image
        == "agent-server"
    )
    with pytest.raises(ValidationError, match="sandbox_provider"):
        from_env({"CONTROL_PLANE_SANDBOX_PROVIDER": "vm"})


def test_the_swarm_provider_needs_an_address_every_node_reaches() -> None:
    swarm = {"CONTROL_PLANE_SANDBOX_PROVIDER": "swarm", "CONTROL_PLANE_HOST": "0.0.0.0"}
    for public in (None, "http://127.0.0.1:3000", "http://0.0.0.0:3000"):
        env = swarm if public is None else {**swarm, "CONTROL_PLANE_PUBLIC_URL": public}
        with pytest.raises(ValidationError, match="CONTROL_PLANE_PUBLIC_URL"):
            from_env(env)
    config = from_env(
        {
            **swarm,
            "CONTROL_PLANE_PUBLIC_URL": "http://cp.internal:3000",
            "CONTROL_PLANE_SWARM_CONSTRAINTS": "node.role==worker, node.labels.a==b",
            "CONTROL_PLANE_SWARM_MEMORY_RESERVATION": "1GiB",
        }
    )
    assert config.swarm_constraints == ("node.role==worker", "node.labels.a==b")
    assert (config.swarm_memory_reservation, config.swarm_network) == (1024**3, "bridge")
    with pytest.raises(ValidationError, match="swarm_placement_timeout"):
        from_env(
            {
                **swarm,
                "CONTROL_PLANE_PUBLIC_URL": "http://cp.internal:3000",
                "CONTROL_PLANE_SWARM_PLACEMENT_TIMEOUT": "0",
            }
        )


def test_a_runtime_is_the_container_providers() -> None:
    docker = {"CONTROL_PLANE_SANDBOX_PROVIDER": "docker", "CONTROL_PLANE_HOST": "0.0.0.0"}
    assert from_env({**docker, "CONTROL_PLANE_SANDBOX_RUNTIME": "runsc"}).sandbox_runtime == "runsc"
    with pytest.raises(ValidationError, match="sandbox_runtime"):
        from_env({**docker, "CONTROL_PLANE_SANDBOX_RUNTIME": "runsc --debug"})
    with pytest.raises(ValidationError, match="CONTROL_PLANE_SANDBOX_ISOLATION=gvisor"):
        from_env({"CONTROL_PLANE_SANDBOX_RUNTIME": "runsc"})
    swarm = {
        "CONTROL_PLANE_SANDBOX_PROVIDER": "swarm",
        "CONTROL_PLANE_HOST": "0.0.0.0",
        "CONTROL_PLANE_PUBLIC_URL": "http://cp.internal:3000",
        "CONTROL_PLANE_SANDBOX_RUNTIME": "runsc",
    }
    assert from_env(swarm).sandbox_runtime == "runsc"  # the nodes' default, their fences check
    with pytest.raises(ValidationError, match="checked by the nodes' fences"):
        from_env({**swarm, "CONTROL_PLANE_SANDBOX_NETWORK": "host"})
