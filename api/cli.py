"""``mcp-reconciler`` command line.

Every subcommand names the function that runs it (``set_defaults(func=...)``); ``main`` calls
``args.func(args)`` and returns its exit code. A command's module is imported only when that
command runs, so ``status`` does not pay for uvicorn and the engine.

Writing to a closed pipe (``mcp-reconciler status | head -3``) ends any command quietly: stdout
is flushed inside :func:`main`, where a ``BrokenPipeError`` is caught (also when an anyio task
group wraps it), and then pointed at ``/dev/null`` so the interpreter's own flush at exit has
nothing left to fail on. The exit code is the command's own (0 if the closed pipe cut it short).
``serve`` and ``reconcile`` notice at their next line of output and stop cleanly (I14)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence

from mcp_reconciler.api.version import __version__


def _serve(args: argparse.Namespace) -> int:
    from mcp_reconciler.api.server import run_serve

    return _run_gateway(run_serve, args.config, args.host, args.port, args.insecure_no_auth, args.port_file)


def _stdio(args: argparse.Namespace) -> int:
    from mcp_reconciler.api.server import run_stdio

    return _run_gateway(run_stdio, args.config, args.view)


def _run_gateway(func: Callable[..., Awaitable[int]], *func_args: object) -> int:
    import gc

    import anyio

    from mcp_reconciler.reconciler.config import ConfigError

    # What the imports made (the SDK, pydantic, uvicorn: ~100,000 objects) lives as long as the
    # process. Frozen, a full collection skips it: a collection that falls inside a big upstream
    # parse paused the loop for 100-155 ms, now a few ms (ADR 0025, bench_upstream_bounds.py C).
    gc.collect()
    gc.freeze()
    try:
        return anyio.run(func, *func_args)
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
        if isinstance(exc, BrokenPipeError):
            raise  # main's closed-pipe handling
        print(f"mcp-reconciler: {exc}", file=sys.stderr)
        return 1


def _demo(args: argparse.Namespace) -> int:
    from mcp_reconciler.api.demo import main as demo_main

    return demo_main()


def _reconcile(args: argparse.Namespace) -> int:
    from mcp_reconciler.api.reconcile_cmd import run as reconcile_run

    return reconcile_run(args.config, once=args.once)


def _check_config(args: argparse.Namespace) -> int:
    from mcp_reconciler.api.check_config import run as check_run

    return check_run(args.file)


def build_parser() -> argparse.ArgumentParser:
    """The whole CLI; each subparser's ``func`` default is the function that runs it."""
    parser = argparse.ArgumentParser(prog="mcp-reconciler", description="An MCP gateway built like a reconciler.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--log-level", help="operator log level (default: $MCP_RECONCILER_LOG_LEVEL, else WARNING)")
    parser.add_argument(
        "--log-format", choices=LOG_FORMATS, help="operator log format (default: $MCP_RECONCILER_LOG_FORMAT, else text)"
    )
    parser.add_argument(
        "--otel-console",
        action="store_true",
        help="export OpenTelemetry spans and metrics (every 10 s and at exit) to stderr; "
        "the OpenTelemetry SDK is a dependency; OTLP export needs pip install 'mcp-reconciler[otel]'",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the MCP endpoint over streamable HTTP (no --config: the bundled demo)")
    serve.add_argument("--config", help="gateway YAML (default: $MCP_RECONCILER_CONFIG, else the bundled demo config)")
    serve.add_argument(
        "--host", help="listen address (default: $MCP_RECONCILER_HOST, else the config's, else 127.0.0.1)"
    )
    serve.add_argument(
        "--port", type=int, help="listen port (default: $MCP_RECONCILER_PORT, else the config's, else 8765)"
    )
    serve.add_argument(
        "--port-file",
        help="once listening, write the port to this file (atomically); with --port 0, how a supervisor learns it",
    )
    serve.add_argument(
        "--insecure-no-auth", action="store_true", help="DEMOS ONLY: accept every control-API request as operator"
    )
    serve.set_defaults(func=_serve)
    stdio = sub.add_parser("stdio", help="serve one MCP session over stdin/stdout")
    stdio.add_argument("--config", help="gateway YAML (default: $MCP_RECONCILER_CONFIG, else the bundled demo config)")
    stdio.add_argument("--view", help="serve this named view of the config's views: (default: the whole catalog)")
    stdio.set_defaults(func=_stdio)
    demo = sub.add_parser("demo", help="run the bundled engine demo (in-process MCP servers, no network)")
    demo.set_defaults(func=_demo)
    from mcp_reconciler.api.operator_cli import add_commands

    add_commands(sub)
    rc = sub.add_parser("reconcile", help="run the engine headless on a config file, printing publications")
    rc.add_argument("--config", help="gateway YAML (default: $MCP_RECONCILER_CONFIG; one of them is required)")
    rc.add_argument("--once", action="store_true", help="print the first generation's status and exit")
    rc.set_defaults(func=_reconcile)
    check = sub.add_parser("check-config", help="validate a config file without serving (exit 0 valid, 1 invalid)")
    check.add_argument("file", nargs="?", help="the config file (default: $MCP_RECONCILER_CONFIG)")
    check.set_defaults(func=_check_config)
    from mcp_reconciler.api.import_config import add_parser as add_import

    add_import(sub)
    from mcp_reconciler.api.audit_cli import add_parser as add_audit

    add_audit(sub)
    return parser


def _broken_pipe(exc: BaseException) -> bool:
    """``exc`` is a closed-pipe error, alone or as the only kind in an exception group."""
    if isinstance(exc, BrokenPipeError):
        return True
    if isinstance(exc, BaseExceptionGroup):
        _, rest = exc.split(BrokenPipeError)
        return rest is None
    return False


def _stdout_to_devnull() -> None:
    """Point fd 1 at /dev/null: whatever is still buffered is dropped at exit, not re-raised."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (``--help``/``--version``/usage errors raise
    ``SystemExit`` as argparse does). A closed stdout is not an error and prints nothing: a
    command that finished keeps its own exit code, one cut short by it exits 0."""
    code = 0
    try:
        try:
            code = _main(argv)
        finally:
            sys.stdout.flush()  # a closed pipe surfaces here, not in the interpreter's exit flush
        return code
    except BaseException as exc:
        if not _broken_pipe(exc):
            raise
        _stdout_to_devnull()
        return code


LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def apply_environment(
    parser: argparse.ArgumentParser, args: argparse.Namespace, environ: Mapping[str, str] = os.environ
) -> None:
    """Fill what the flags left unset from ``MCP_RECONCILER_CONFIG``, ``_HOST``, ``_PORT``,
    ``_LOG_LEVEL`` and ``_LOG_FORMAT``: flags win over the environment, the environment over
    the config file (whose ``gateway:`` host and port apply only when both are unset). A bad
    value is a usage error naming the variable (exit 2)."""

    def env(name: str) -> str | None:
        value = environ.get(f"MCP_RECONCILER_{name}", "").strip()
        return value or None

    if args.log_level is None:
        args.log_level = env("LOG_LEVEL") or "WARNING"
        if args.log_level.upper() not in LOG_LEVELS:
            parser.error(f"MCP_RECONCILER_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}")
    elif args.log_level.upper() not in LOG_LEVELS:
        parser.error(f"--log-level must be one of {', '.join(LOG_LEVELS)}")
    if args.log_format is None:
        args.log_format = env("LOG_FORMAT") or "text"
        if args.log_format not in LOG_FORMATS:
            parser.error("MCP_RECONCILER_LOG_FORMAT must be text or json")
    if hasattr(args, "config") and args.config is None:
        args.config = env("CONFIG")
    if getattr(args, "command", None) == "reconcile" and args.config is None:
        parser.error("reconcile needs --config FILE (or MCP_RECONCILER_CONFIG)")
    if getattr(args, "command", None) == "check-config" and args.file is None:
        args.file = env("CONFIG")
        if args.file is None:
            parser.error("check-config needs FILE (or MCP_RECONCILER_CONFIG)")
    if hasattr(args, "host") and args.host is None:
        args.host = env("HOST")
    if hasattr(args, "port") and args.port is None and env("PORT") is not None:
        port = env("PORT") or ""
        if not port.isdigit() or not 0 <= int(port) <= 65535:
            parser.error("MCP_RECONCILER_PORT must be a port number (0-65535)")
        args.port = int(port)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    apply_environment(parser, args)
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
        return int(args.func(args))
    finally:
        if shutdown_otel is not None:
            shutdown_otel()  # last metric export, before the interpreter tears down


if __name__ == "__main__":
    sys.exit(main())
