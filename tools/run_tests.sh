#!/usr/bin/env bash
# The whole test suite from a fresh clone: the README's test command, and what .ci/run runs.
#
# 1. A test venv with the gateway's dependencies + dev extras, cached outside the repo under
#    $BATCHING_GATEWAY_CACHE (default ~/.cache/batching-gateway), keyed by the pinned
#    dependency list and the Python version; marked complete only at the end, so a missing
#    or half-built cache rebuilds itself. The gateway itself is imported from this checkout, not installed.
# 2. Each real predictor's own venv (Triton via nvidia-pytriton, KServe, TorchServe, Infinity, KServe's OpenAI
#    endpoint), same caching.
# 3. ruff (lint, import order), mypy and lint-imports (which way the rooms depend) over the code,
#    configured in pyproject.toml: all clean.
# 4. pytest over tests/ (extra arguments are passed through).
#
# The tests also drive programs from Debian's packages, installed with apt-get when missing
# (root, or passwordless sudo), else this fails here: `hey` (load against the v1 endpoint),
# `promtool` (package prometheus: checks deploy/'s alerting rules), `chromium` and
# `chromedriver` (package chromium-driver: the live page, in a headless browser), `ss`
# (package iproute2: a listening socket's backlog), `redis-server` (the store of `[shared]` quotas across replicas).
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_TOOLS=(hey:hey promtool:prometheus chromium:chromium chromedriver:chromium-driver ss:iproute2 redis-server:redis-server)
missing=()
for tool in "${DEBIAN_TOOLS[@]}"; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool#*:}")
done
apt_install() {
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || return 1
    sudo=(sudo -n)
  fi
  "${sudo[@]}" apt-get update -q &&
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}
if [ ${#missing[@]} -gt 0 ]; then
  echo "not installed: ${missing[*]}: apt-get install -y ${missing[*]}"
  if ! apt_install "${missing[@]}"; then
    echo "error: ${missing[*]} missing and could not be installed (apt-get install needs root or" \
         "passwordless sudo and a reachable Debian archive); install them, then run this again" >&2
    exit 1
  fi
fi

PYTHON="${PYTHON:-python3}"
CACHE="${BATCHING_GATEWAY_CACHE:-$HOME/.cache/batching-gateway}"
mkdir -p "$CACHE/venvs"

requirements=$("$PYTHON" - <<'PY'
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["dev"]))
PY
)
key=$( { echo "$requirements"; "$PYTHON" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-12)
venv="$CACHE/venvs/gateway-test-$key"
# The marker is written last: a venv without it is half-built and is rebuilt.
if [ ! -f "$venv/.complete" ]; then
  started=$(date +%s)
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  echo "$requirements" > "$venv/requirements.txt"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$venv/requirements.txt"
  touch "$venv/.complete"
  echo "test venv built in $(( $(date +%s) - started )) s: $venv"
fi

"$venv/bin/python" -m tools.predictor_envs triton kserve torchserve infinity kserve-openai

"$venv/bin/python" -m ruff check .
"$venv/bin/python" -m mypy
"$venv/bin/lint-imports"  # the rooms' import contracts, [tool.importlinter] in pyproject.toml

# KServe starts in ~2 s with bytecode cached, 6-8 s without (BACKENDS.md).
unset PYTHONDONTWRITEBYTECODE
exec "$venv/bin/python" -m pytest -q "$@"
