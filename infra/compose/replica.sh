#!/bin/sh
# A read replica: on first start, a copy of the primary (pg_basebackup, with a replication
# slot so the primary keeps the WAL it has not streamed yet); then a hot standby with
# Chronicle's replica settings.
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    until pg_isready -h postgres-primary -U "$POSTGRES_USER"; do sleep 1; done
    PGPASSWORD="$REPLICATION_PASSWORD" pg_basebackup -h postgres-primary -U replicator \
        -D "$PGDATA" -R -C -S "${REPLICA_SLOT:-replica_1}" -X stream
    echo "include '/etc/chronicle/postgres/replica.conf'" >> "$PGDATA/postgresql.conf"
    chmod 0700 "$PGDATA"
fi
exec postgres
