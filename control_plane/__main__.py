"""`control-plane` / `python -m control_plane`: `serve` (the default), or the API keys:
`keys create --user NAME`, `keys list [--user NAME]`, `keys revoke (ID | --user NAME)` (each
made or revoked key in the audit log, by `cli`); `audit [--user U] [--action A] [--since T]
[--limit N] [--table]`: the audit log, newest first, for an operator on the database's
machine; `node-fence --token-file PATH`: a gVisor Swarm node's fence, for its operator to run."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from control_plane.config import PREFIX, Config, from_env
from web import config as config_kit
from web.logs import JsonFormatter, SafeFormatter

if TYPE_CHECKING:
    import uvicorn


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
    audit = commands.add_parser(
        "audit",
        help="the audit log, newest first: who created or revoked keys, started, paused, "
        "resumed or deleted sandboxes, changed network policies, settings or secrets "
        "(one JSON object a line, or --table)",
    )
    audit.add_argument("--user", help="a user's id or name: its acts and those on its things")
    audit.add_argument("--action", help="an action (sandbox.delete), or a prefix and * (sandbox.*)")
    audit.add_argument("--actor", help="who acted: a user's id, operator, cli, system")
    audit.add_argument(
        "--since",
        type=moment,
        metavar="T",
        help="at or after T (ISO 8601; without an offset, UTC)",
    )
    audit.add_argument(
        "--limit",
        type=limit,
        default=100,
        metavar="N",
        help=f"at most N records (1 to {MAX_AUDIT_LINES}; default 100)",
    )
    audit.add_argument("--table", action="store_true", help="a table for a person, not JSON")
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


#: Records `control-plane audit` prints at most.
MAX_AUDIT_LINES = 10_000


def moment(text: str) -> datetime:
    """An ISO 8601 time as the CLI takes it (without an offset: UTC)."""
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def limit(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_AUDIT_LINES:
        raise argparse.ArgumentTypeError(f"a number from 1 to {MAX_AUDIT_LINES}")
    return int(text)


def load_config(args: argparse.Namespace) -> Config:
    return from_env(**config_kit.flags(args, Config, PREFIX))


async def manage_keys(config: Config, args: argparse.Namespace) -> str:
    """`keys list` and `keys revoke`: what to print. ValueError when nothing matches."""
    from control_plane.accounts import Accounts
    from control_plane.audit import CLI, AuditLog
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
        owner = args.user or next((k.user for k in await accounts.keys() if k.id == args.id), None)
        revoked = await accounts.revoke(key_id=args.id, user=args.user)
        if not revoked:
            raise ValueError(f"no key {args.id}" if args.id else f"user {args.user!r} has no key")
        await AuditLog(db).record(
            actor=CLI,
            action="api_key.revoke",
            target_kind="api_key" if args.id else "user",
            target_id=args.id or args.user,
            source=CLI,
            user_name=owner,
            details={"user": owner, "keys": revoked},
        )
        return f"revoked {revoked} key{'s' if revoked > 1 else ''}"
    finally:
        await db.close()


async def create_key(config: Config, name: str) -> str:
    """A new key for the user; only its hash is stored, so this is the one time it is shown."""
    from control_plane.accounts import Accounts, user_name
    from control_plane.audit import CLI, AuditLog
    from control_plane.store import Database

    name = user_name(name)  # a bad name changes nothing, not even the database's place
    db = Database(config.db_url)
    try:
        await db.migrate()
        accounts = Accounts(db)
        key = await accounts.create_key(name)
        user = await accounts.by_key(key)
        await AuditLog(db).record(
            actor=CLI,
            action="api_key.create",
            target_kind="user",
            target_id=user.id if user else None,
            source=CLI,
            user_id=user.id if user else None,
            details={"user": name},
        )
        return key
    finally:
        await db.close()


async def read_audit(config: Config, args: argparse.Namespace) -> str:
    """`audit`: the matching records, newest first, as JSON lines or a table."""
    from control_plane.audit import AuditLog, AuditQuery
    from control_plane.store import Database

    db = Database(config.db_url)
    try:
        await db.migrate()
        found = await AuditLog(db).search(
            AuditQuery(user=args.user, action=args.action, actor=args.actor, since=args.since),
            args.limit,
        )
    finally:
        await db.close()
    records: list[dict[str, Any]] = [{**vars(entry), "at": entry.at.isoformat()} for entry in found]
    if not args.table:
        return "\n".join(json.dumps(r, ensure_ascii=False) for r in records)
    columns = ("at", "actor", "action", "target_kind", "target_id", "user_id", "source", "details")
    rows = [
        [
            json.dumps(r[c], ensure_ascii=False)[:60] if c == "details" else str(r[c] or "-")
            for c in columns
        ]
        for r in records
    ]
    widths = [max([len(c), *(len(row[i]) for row in rows)]) for i, c in enumerate(columns)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip()
        for line in [list(columns), *rows]
    )


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
    handler.setFormatter(
        JsonFormatter()
        if config.log_format == "json"
        else SafeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
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
    if args.command == "audit":
        out = asyncio.run(read_audit(config, args))
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

    server(config).run()


def server(config: Config) -> uvicorn.Server:
    """The uvicorn server over the control plane's app, not yet running."""
    import uvicorn

    from control_plane.app import Server, build_app

    return Server(
        uvicorn.Config(
            build_app(config),
            host=config.host,
            port=config.port,
            log_level=config.log_level,
            # JSON: uvicorn's records through the root handler, one object per line; text:
            # uvicorn's own lines, as an operator knows them.
            log_config=None if config.log_format == "json" else uvicorn.config.LOGGING_CONFIG,
            access_log=False,  # the app's own (`web.accesslog`): never a query string
            lifespan="on",
            timeout_graceful_shutdown=10,
            timeout_keep_alive=config.keep_alive_seconds,  # past the clients' (see there)
        )
    )


if __name__ == "__main__":
    main()
