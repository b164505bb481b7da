"""Chronicle's benchmark: seed a large history, drive the service over NATS, report against the aims.

Run it with `./dev bench` (or `python -m bench --help`); `--quick` is a small, fast check.
"""
