#!/usr/bin/env bash
# Start the test services if they are down: Redis on 127.0.0.1:6379 (no persistence) and PostgreSQL on
# 127.0.0.1:5432 (database `test`, trust auth), and Debian's Chromium for the browser tests.
set -uo pipefail
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  if command -v redis-server >/dev/null; then
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
  else
    echo "warning: Redis is down and redis-server is not installed" >&2
  fi
fi
if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
  else
    echo "warning: PostgreSQL is down and no cluster is installed" >&2
  fi
fi
for _ in $(seq 1 30); do
  redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null && break
  sleep 1
done
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
    || echo "warning: could not install chromium; browser tests will be skipped" >&2
fi
exit 0
