"""`holdpoint-mcp`: a recovery proxy between any MCP client and any MCP server.

Install with the `mcp` extra (`pip install 'holdpoint-sdk[mcp]'`) and configure the client to
launch `holdpoint-mcp --upstream "CMD ARGS"` instead of the server; see sdk/README.md."""

from .config import ConfigError, ProxyConfig, ToolPolicy, load_settings, parse_settings

__all__ = ["ConfigError", "ProxyConfig", "ToolPolicy", "load_settings", "parse_settings"]
