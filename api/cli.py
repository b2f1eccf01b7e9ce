"""``mcp-reconciler`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcp-reconciler", description="An MCP gateway built like a reconciler.")
    parser.add_argument("--log-level", default="WARNING", help="operator log level (default: WARNING)")
    parser.add_argument("--log-format", choices=("text", "json"), default="text", help="operator log format")
    parser.add_argument(
        "--otel-console",
        action="store_true",
        help="export OpenTelemetry spans and metrics (every 10 s and at exit) to stderr; "
        "needs the SDK: pip install 'mcp-reconciler[otel]'",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the MCP endpoint over streamable HTTP (no --config: the bundled demo)")
    serve.add_argument("--config", help="gateway YAML (default: the bundled demo config)")
    serve.add_argument("--host", help="listen address (default: the config's, else 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (default: the config's, else 8765)")
    serve.add_argument(
        "--insecure-no-auth", action="store_true", help="DEMOS ONLY: accept every control-API request as operator"
    )
    stdio = sub.add_parser("stdio", help="serve one MCP session over stdin/stdout")
    stdio.add_argument("--config", help="gateway YAML (default: the bundled demo config)")
    sub.add_parser("demo", help="run the bundled engine demo (in-process MCP servers, no network)")
    from mcp_reconciler.api.operator_cli import add_common

    for name, text in (
        ("status", "provenance: revision, freshness, sources (exit 0 ready, 4 not ready)"),
        ("sources", "every source's live state"),
        ("generations", "live generations (current and retiring)"),
        ("sessions", "agent sessions"),
    ):
        add_common(sub.add_parser(name, help=text))
    refresh = sub.add_parser("refresh", help="reconcile now and print the resulting revision")
    add_common(refresh)
    refresh.add_argument("--source", help="only this source")
    refresh.add_argument("--no-wait", action="store_true", help="return once the request is queued (202)")
    refresh.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the cycle (default 30)")
    rc = sub.add_parser("reconcile", help="run the engine headless on a config file, printing publications")
    rc.add_argument("--config", required=True)
    rc.add_argument("--once", action="store_true", help="print the first generation's status and exit")
    check = sub.add_parser("check-config", help="validate a config file without serving (exit 0 valid, 1 invalid)")
    check.add_argument("file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Logs go to stderr (on `stdio`, stdout carries the MCP protocol), with secrets redacted.
    from mcp_reconciler.api.logs import configure

    configure(args.log_level, args.log_format)
    shutdown_otel = None
    if args.otel_console:
        # Before any engine module is imported (they create their tracer/meter at import time;
        # the API's proxies would delegate anyway, this keeps it independent of that).
        from mcp_reconciler.api.otel import OtelUnavailableError, configure_console

        try:
            shutdown_otel = configure_console()
        except OtelUnavailableError as exc:
            print(f"mcp-reconciler: {exc}", file=sys.stderr)
            return 2
    try:
        return _dispatch(args)
    finally:
        if shutdown_otel is not None:
            shutdown_otel()  # last metric export, before the interpreter tears down


def _dispatch(args: argparse.Namespace) -> int:
    if args.command in ("serve", "stdio"):
        import anyio

        from mcp_reconciler.api.server import BUNDLED_DEMO, run_serve, run_stdio
        from mcp_reconciler.reconciler.config import ConfigError

        try:
            if args.command == "serve":
                return anyio.run(run_serve, args.config, args.host, args.port, args.insecure_no_auth)
            return anyio.run(run_stdio, args.config or BUNDLED_DEMO)
        except KeyboardInterrupt:
            return 130
        except ConfigError as exc:
            print(str(exc), file=sys.stderr)
            print(
                "mcp-reconciler: the config is invalid; fix it (check with `mcp-reconciler check-config FILE`)",
                file=sys.stderr,
            )
            return 1
        except OSError as exc:
            print(f"mcp-reconciler: {exc}", file=sys.stderr)
            return 1
    if args.command in ("status", "sources", "generations", "sessions", "refresh"):
        from mcp_reconciler.api.operator_cli import run as operator_run

        return operator_run(args)
    if args.command == "demo":
        from mcp_reconciler.api.demo import main as demo_main

        return demo_main()
    if args.command == "reconcile":
        from mcp_reconciler.api.reconcile_cmd import run as reconcile_run

        return reconcile_run(args.config, once=args.once)
    if args.command == "check-config":
        from mcp_reconciler.api.check_config import run as check_run

        return check_run(args.file)
    return 2


if __name__ == "__main__":
    sys.exit(main())
