#!/bin/sh
# The image's entrypoint (deploy/Containerfile; PID 1 is tini, which runs this).
#
# No arguments: serve on 0.0.0.0 (a container is reached from outside its network namespace) at
# port ${MCP_RECONCILER_PORT:-8765}, with the config at ${MCP_RECONCILER_CONFIG}, else at
# /etc/mcp-reconciler/gateway.yaml, else -- neither given nor mounted -- the bundled demo (run
# from a copy in TMPDIR: the installed package is read-only). A MCP_RECONCILER_CONFIG that names
# no file is an error, never the demo. Arguments: an mcp-reconciler command line, run as given
# (`podman run IMAGE check-config /etc/mcp-reconciler/gateway.yaml`).
# `exec`, so tini's SIGTERM reaches the gateway itself, not a shell.
set -eu
if [ "$#" -gt 0 ]; then
    exec mcp-reconciler "$@"
fi
default=/etc/mcp-reconciler/gateway.yaml
config="${MCP_RECONCILER_CONFIG:-$default}"
host="${MCP_RECONCILER_HOST:-0.0.0.0}"
port="${MCP_RECONCILER_PORT:-8765}"
if [ -f "$config" ]; then
    exec mcp-reconciler serve --config "$config" --host "$host" --port "$port"
fi
if [ -n "${MCP_RECONCILER_CONFIG:-}" ] || [ -e "$default" ]; then
    echo "mcp-reconciler-entrypoint: the config $config is not a file (mount one, or unset MCP_RECONCILER_CONFIG for the demo)" >&2
    exit 1
fi
echo "mcp-reconciler-entrypoint: no config at $default: serving the bundled demo (anonymous /mcp: DEMO ONLY)" >&2
exec env -u MCP_RECONCILER_CONFIG mcp-reconciler serve --host "$host" --port "$port"
