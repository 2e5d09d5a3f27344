#!/usr/bin/env bash
# Build entry point for spark_ivm.
#
#   ./build.sh setup          create .venv, install the project (-e .[dev], versions of constraints.txt),
#                             fetch the Delta jars
#   ./build.sh test [ARGS]    setup, then run pytest (ARGS go to pytest)
#   ./build.sh demo [ARGS]    setup, then run examples/demo.py
#   ./build.sh bench [ARGS]   setup, then run python -m spark_ivm.bench
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
ROOT="$(pwd)"

VENV="$ROOT/.venv"
PY="$VENV/bin/python"
CACHE="$ROOT/.cache"
JARS="$CACHE/jars"
STAMP="$VENV/.spark_ivm-install.stamp"   # goes away with the venv

DELTA_VERSION="4.4.0"
DELTA_ARTIFACTS=(delta-spark_4.2_2.13 delta-storage delta-kernel-api delta-kernel-defaults)

log() { printf '[build] %s\n' "$*" >&2; }

usage() {
    cat >&2 <<'EOF'
usage: ./build.sh <verb> [args...]

verbs:
  setup    create .venv, install the project with its dev extra, fetch the Delta jars
  test     setup if needed, then run the test suite (extra args go to pytest)
  demo     setup if needed, then run examples/demo.py (extra args go to the demo)
  bench    setup if needed, then run python -m spark_ivm.bench (extra args go to it)
EOF
}

pip_key() {
    # Anything that changes what pip must install invalidates the stamp.
    { cat pyproject.toml constraints.txt; "$PY" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1
}

setup_venv() {
    if [[ ! -x "$PY" ]]; then
        log "creating .venv"
        rm -rf "$VENV"
        python3 -m venv "$VENV"
    fi
    local key
    key="$(pip_key)"
    if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$key" ]]; then
        return 0
    fi
    log "installing spark_ivm (-e .[dev]) into .venv; this takes a minute or two the first time"
    # Exact versions (constraints.txt); pyproject.toml only gives the ranges the library accepts.
    "$PY" -m pip install --quiet -c constraints.txt pip
    "$PY" -m pip install --quiet -c constraints.txt -e ".[dev]"
    printf '%s\n' "$key" >"$STAMP"
}

setup_jars() {
    local missing=()
    local a
    for a in "${DELTA_ARTIFACTS[@]}"; do
        [[ -f "$JARS/$a-$DELTA_VERSION.jar" ]] || missing+=("$a")
    done
    ((${#missing[@]} == 0)) && return 0
    if ! command -v mvn >/dev/null 2>&1; then
        log "error: Maven (mvn) is needed once to fetch the Delta Lake jars into .cache/jars"
        exit 1
    fi
    mkdir -p "$JARS"
    for a in "${missing[@]}"; do
        log "fetching io.delta:$a:$DELTA_VERSION"
        # Download to a temp dir first so an interrupted fetch never leaves a partial jar.
        local tmp
        tmp="$(mktemp -d "$CACHE/jar.XXXXXX")"
        if ! mvn -B dependency:copy \
            -Dartifact="io.delta:$a:$DELTA_VERSION" \
            -DoutputDirectory="$tmp" >"$tmp.log" 2>&1; then
            tail -n 40 "$tmp.log" >&2
            rm -rf "$tmp" "$tmp.log"
            log "error: could not fetch io.delta:$a:$DELTA_VERSION with Maven"
            exit 1
        fi
        rm -f "$tmp.log"
        mv "$tmp/$a-$DELTA_VERSION.jar" "$JARS/"
        rm -rf "$tmp"
    done
}

setup() {
    setup_venv
    setup_jars
}

verb="${1:-}"
[[ $# -gt 0 ]] && shift

case "$verb" in
    setup)
        setup
        log "ready"
        ;;
    test)
        setup
        rc=0
        "$PY" -m pytest -q "$@" || rc=$?
        if ((rc == 5)); then
            log "error: pytest collected no tests"
            exit 1
        fi
        exit "$rc"
        ;;
    demo)
        setup
        if [[ ! -f examples/demo.py ]]; then
            log "error: examples/demo.py does not exist yet"
            exit 1
        fi
        exec "$PY" examples/demo.py "$@"
        ;;
    bench)
        setup
        if ! "$PY" -c 'import importlib.util, sys; sys.exit(0 if importlib.util.find_spec("spark_ivm.bench") else 1)' 2>/dev/null; then
            log "error: the benchmark module spark_ivm.bench does not exist yet"
            exit 1
        fi
        exec "$PY" -m spark_ivm.bench "$@"
        ;;
    -h | --help | help)
        usage
        ;;
    *)
        [[ -n "$verb" ]] && log "unknown verb: $verb"
        usage
        exit 2
        ;;
esac
