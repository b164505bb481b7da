"""Infrastructure files shipped with Chronicle: SQL migrations, NATS config, deployment."""
