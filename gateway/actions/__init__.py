"""Chat actions for agents: the MCP server (streamable HTTP, on the gateway's own port) whose
tools send messages and files into a chat, read its history and list its members, for clients
named in ``mcp.clients``, each call under the app's platform budget, audited and counted
(docs/mcp.md)."""
