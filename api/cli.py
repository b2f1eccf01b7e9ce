"""``mcp-reconciler`` command line."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcp-reconciler", description="An MCP gateway built like a reconciler.")
    parser.add_argument("--log-level", default="WARNING", help="operator log level (default: WARNING)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run the bundled engine demo (in-process MCP servers, no network)")
    rc = sub.add_parser("reconcile", help="run the engine headless on a config file, printing publications")
    rc.add_argument("--config", required=True)
    rc.add_argument("--once", action="store_true", help="print the first generation's status and exit")
    check = sub.add_parser("check-config", help="validate a config file without serving (exit 0 valid, 1 invalid)")
    check.add_argument("file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if args.command == "demo":
        from api.demo import main as demo_main

        return demo_main()
    if args.command == "reconcile":
        from api.reconcile_cmd import run as reconcile_run

        return reconcile_run(args.config, once=args.once)
    if args.command == "check-config":
        from api.check_config import run as check_run

        return check_run(args.file)
    return 2


if __name__ == "__main__":
    sys.exit(main())
