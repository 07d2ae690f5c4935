#!/usr/bin/env bash
# Make sure the services the test suite talks to are up on 127.0.0.1, starting any that is down
# with the command this machine kind documents, then create the databases the tests connect to.
# Idempotent; takes well under a second when everything is already up.
#
#   SERVICES_TIMEOUT  seconds to wait for a service after starting it (default 60)
set -euo pipefail

TIMEOUT="${SERVICES_TIMEOUT:-60}"
HOST=127.0.0.1
failed=()

# ---- probes: exit 0 when the service answers -------------------------------------------------

probe_postgresql() {
    if command -v pg_isready >/dev/null 2>&1; then
        pg_isready -q -h "$HOST" -p 5432 -t 2
    else
        timeout 2 bash -c ">/dev/tcp/$HOST/5432" 2>/dev/null
    fi
}

probe_mariadb() {
    if command -v mariadb-admin >/dev/null 2>&1; then
        mariadb-admin -h"$HOST" -P3306 -uroot --connect-timeout=2 ping >/dev/null 2>&1
    else
        timeout 2 bash -c ">/dev/tcp/$HOST/3306" 2>/dev/null
    fi
}

probe_redis() {
    if command -v redis-cli >/dev/null 2>&1; then
        [[ "$(timeout 3 redis-cli -h "$HOST" -p 6379 ping 2>/dev/null)" == PONG ]]
    else
        timeout 2 bash -c ">/dev/tcp/$HOST/6379" 2>/dev/null
    fi
}

# RabbitMQ: send the AMQP 0-9-1 protocol header and expect a method frame (Connection.Start) back,
# which the broker only sends once it accepts client connections.
probe_rabbitmq() {
    timeout 3 bash -c '
        exec 3<>"/dev/tcp/$0/5672" || exit 1
        printf "AMQP\x00\x00\x09\x01" >&3
        IFS= read -r -d "" -N 1 -t 2 byte <&3 || exit 1
        [[ "$byte" == $'"'"'\x01'"'"' ]]
    ' "$HOST" 2>/dev/null
}

# ---- start commands (from the machine page, "Known to work") ---------------------------------

pg_version() { ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1; }

CMD_postgresql='pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start'
CMD_mariadb='start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd'
CMD_redis='redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log'
CMD_rabbitmq='rabbitmq-server -detached'

start_postgresql() { pg_ctlcluster --skip-systemctl-redirect "$(pg_version)" main start; }
start_mariadb() { start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd; }
start_redis() {
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log
}
start_rabbitmq() { rabbitmq-server -detached; }

# ---- bring each service up ---------------------------------------------------------------------

ensure() {
    local name="$1" cmd_var="CMD_$1"
    if "probe_$name"; then
        echo "$name: up"
        return 0
    fi
    echo "$name: not answering; starting it: ${!cmd_var}" >&2
    local log
    log="$(mktemp)"
    # A start command may complain when the service is already half-up; the probe decides.
    "start_$name" >"$log" 2>&1 || true
    local deadline=$((SECONDS + TIMEOUT))
    until "probe_$name"; do
        if ((SECONDS >= deadline)); then
            echo "$name: DOWN (no answer ${TIMEOUT}s after starting it)" >&2
            sed 's/^/    /' "$log" >&2
            echo "    start it with: ${!cmd_var}" >&2
            rm -f "$log"
            failed+=("$name")
            return 0
        fi
        sleep 1
    done
    rm -f "$log"
    echo "$name: up"
}

for svc in postgresql mariadb redis rabbitmq; do
    ensure "$svc"
done

if ((${#failed[@]})); then
    echo "services.sh: not up: ${failed[*]}" >&2
    exit 1
fi

# ---- databases the tests connect to (Django creates the test_* databases itself) -------------

export PGCONNECT_TIMEOUT=5
if [[ "$(psql -X -q -h "$HOST" -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'")" != 1 ]]; then
    psql -X -q -h "$HOST" -U postgres -d postgres -c 'CREATE DATABASE test'
    echo "postgresql: created database test"
fi
mariadb -h"$HOST" -P3306 -uroot --connect-timeout=5 -e 'CREATE DATABASE IF NOT EXISTS test'
