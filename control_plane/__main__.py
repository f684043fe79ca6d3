"""`control-plane` / `python -m control_plane`: `serve` (the default), or the API keys:
`keys create --user NAME`, `keys list [--user NAME]`, `keys revoke (ID | --user NAME)`;
`node-fence --token-file PATH`: a gVisor Swarm node's fence, for its operator to run."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from pydantic import ValidationError

from control_plane.config import PREFIX, Config, from_env
from web import config as config_kit
from web.logs import SafeFormatter


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="control-plane",
        description=(
            "The application interface (/api/v1) of the agent service. Each flag overrides its "
            "CONTROL_PLANE_* variable."
        ),
    )
    config_kit.add_flags(parser, Config, PREFIX)
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("serve", help="serve the API (the default)")
    keys = commands.add_parser("keys", help="API keys")
    key_commands = keys.add_subparsers(dest="keys_command", required=True)
    create = key_commands.add_parser("create", help="create a key for a user (printed once)")
    create.add_argument("--user", required=True, help="user name (created when new)")
    listing = key_commands.add_parser("list", help="the keys: id, user, creation time")
    listing.add_argument("--user", help="only this user's")
    revoke = key_commands.add_parser(
        "revoke",
        help="revoke a key (or all of a user's): every "
        "control plane on the database refuses it at once",
    )
    which = revoke.add_mutually_exclusive_group(required=True)
    which.add_argument("id", nargs="?", help="the key's id (from `keys list`)")
    which.add_argument("--user", help="every key of this user")
    fence = commands.add_parser(
        "node-fence",
        help=(
            "Swarm on gVisor: write the deployment's fence token to PATH and print the `docker "
            "run` that starts a node's fence on runc (copy PATH to each node, root's, then run it "
            "there)"
        ),
    )
    fence.add_argument(
        "--token-file",
        required=True,
        metavar="PATH",
        help="where the token is written here and read on the nodes",
    )
    return parser.parse_args(argv)


def load_config(args: argparse.Namespace) -> Config:
    return from_env(**config_kit.flags(args, Config, PREFIX))


async def manage_keys(config: Config, args: argparse.Namespace) -> str:
    """`keys list` and `keys revoke`: what to print. ValueError when nothing matches."""
    from control_plane.accounts import Accounts
    from control_plane.store import Database

    db = Database(config.db_url)
    try:
        await db.migrate()
        accounts = Accounts(db)
        if args.keys_command == "list":
            return "\n".join(
                f"{k.id}\t{k.user}\t{k.created_at.isoformat()}"
                for k in await accounts.keys(args.user)
            )
        revoked = await accounts.revoke(key_id=args.id, user=args.user)
        if not revoked:
            raise ValueError(f"no key {args.id}" if args.id else f"user {args.user!r} has no key")
        return f"revoked {revoked} key{'s' if revoked > 1 else ''}"
    finally:
        await db.close()


async def create_key(config: Config, name: str) -> str:
    """A new key for the user; only its hash is stored, so this is the one time it is shown."""
    from control_plane.accounts import Accounts, user_name
    from control_plane.store import Database

    name = user_name(name)  # a bad name changes nothing, not even the database's place
    db = Database(config.db_url)
    try:
        await db.migrate()
        return await Accounts(db).create_key(name)
    finally:
        await db.close()


def node_fence(config: Config, token_file: str) -> str:
    """The fence token written to `token_file` (0400), and the command for each node."""
    from pathlib import Path

    from control_plane.crypto import KEY_FILE, Cipher
    from control_plane.sandboxes.fences import NodeFences
    from control_plane.services import swarm_fence
    from control_plane.store import Database

    if config.sandbox_provider != "swarm" or config.sandbox_runtime is None:
        raise ValueError(
            "node-fence is for Swarm on gVisor (CONTROL_PLANE_SANDBOX_PROVIDER="
            "swarm, CONTROL_PLANE_SANDBOX_RUNTIME=runsc); otherwise the control "
            "plane runs the nodes' fences itself"
        )
    if not config.secret_key and not (config.state_dir / KEY_FILE).exists():
        # (a key made here would give a token no control plane of the deployment accepts)
        raise ValueError(
            "the deployment's secret key is not here: run node-fence with the "
            "control plane's CONTROL_PLANE_SECRET_KEY or its CONTROL_PLANE_STATE_DIR"
        )
    fence = swarm_fence(
        config,
        NodeFences(Database(config.db_url), Cipher.for_config(config.secret_key, config.state_dir)),
    )
    path = Path(token_file)
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(descriptor, "w") as out:
        out.write(fence.fences.token)
    return fence.shell_command(str(path.absolute()))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        config = load_config(args)
    except ValidationError as exc:
        print(f"control-plane: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SafeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=config.log_level.upper(), handlers=[handler])
    logging.getLogger("httpx").setLevel(logging.WARNING)  # it logs every URL
    logging.getLogger("alembic").setLevel(logging.WARNING)  # a line per plugin at every start
    if args.command == "keys":
        try:
            if args.keys_command == "create":
                out = asyncio.run(create_key(config, args.user))
            else:
                out = asyncio.run(manage_keys(config, args))
        except ValueError as exc:
            print(f"control-plane: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        if out:
            print(out)
        return
    if args.command == "node-fence":
        try:
            print(node_fence(config, args.token_file))
        except (ValueError, OSError) as exc:
            print(f"control-plane: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        return

    import uvicorn

    from control_plane.app import Server, build_app

    Server(
        uvicorn.Config(
            build_app(config),
            host=config.host,
            port=config.port,
            log_level=config.log_level,
            lifespan="on",
            timeout_graceful_shutdown=10,
        )
    ).run()


if __name__ == "__main__":
    main()
