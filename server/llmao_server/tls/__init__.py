"""Box TLS and HTTPS: the fleet CA, when box certificates expire, HSTS. Imports nothing else
of the server, so every floor above may use it (docs/architecture.md)."""
