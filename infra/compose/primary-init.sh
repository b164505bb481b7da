#!/bin/sh
# Runs once, when the primary's data directory is made (the postgres image's
# docker-entrypoint-initdb.d): Chronicle's primary settings and pg_hba lines, and the role
# replicas stream as.
set -eu
echo "include '/etc/chronicle/postgres/primary.conf'" >> "$PGDATA/postgresql.conf"
cat /etc/chronicle/postgres/pg_hba.conf >> "$PGDATA/pg_hba.conf"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v password="$REPLICATION_PASSWORD" <<'SQL'
CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD :'password';
SQL
