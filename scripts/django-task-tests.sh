#!/usr/bin/env bash
# Runs Django's own tests/tasks suite (from the Django sdist on PyPI, matching the installed Django)
# against kinetis_queue.tasks.KinetisTaskBackend, once per connection named in $KINETIS_UPSTREAM_CONNECTIONS.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
version="$("$PY" -c 'import django; print(django.get_version())')"
cache=".cache/django-sdist"
tests_dir="$cache/django-$version/tests"
if [ ! -d "$tests_dir/tasks" ]; then
  mkdir -p "$cache"
  "$PY" -m pip download --quiet --no-deps --no-binary :all: "django==$version" -d "$cache" 2>/dev/null
  tar -xzf "$cache/django-$version.tar.gz" -C "$cache" "django-$version/tests/tasks"
fi
for connection in ${KINETIS_UPSTREAM_CONNECTIONS:-sqlite redis}; do
  echo "== Django $version tests/tasks against KinetisTaskBackend on the $connection connection"
  KINETIS_UPSTREAM_CONNECTION="$connection" PYTHONPATH="$PWD:$PWD/$tests_dir" \
    "$PY" -m pytest tests_upstream -p pytest_django --ds=tests_upstream.settings -o addopts="-p no:cacheprovider" -rs -q "$@"
done
