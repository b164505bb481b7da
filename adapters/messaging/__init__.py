"""NATS: the micro-service endpoints and the JetStream streams Chronicle owns."""
