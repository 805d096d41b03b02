"""The metrics face: ``/metrics`` for Prometheus and ``/metrics/targets`` for its scrapes."""
