"""Chronicle's interfaces at the edge besides NATS: the REST API and the MCP server, both clients of the service over NATS."""
