#!/usr/bin/env bash
# Runs the JS client compatibility tests against the fake backend (server/cmd/fakeserve) on a
# free 127.0.0.1 port; against `dflash serve` (built from ./cmd/dflash) serving the model at
# DFLASH_REAL_MODEL (a llama2.c checkpoint or Hugging Face folder) when that is set; or against an
# already running server when DFLASH_URL is set (then set DFLASH_MODEL, and leave
# DFLASH_EXPECT_TEXT unset for a real model).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$here"
npm ci --no-audit --no-fund --loglevel=error

pid=""
hubpid=""
tmp="$(mktemp -d)"
cleanup() {
  if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  if [[ -n "$hubpid" ]]; then kill "$hubpid" 2>/dev/null || true; wait "$hubpid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

if [[ -z "${DFLASH_URL:-}" ]]; then
  # Port 0: the kernel picks a free port; the server writes the bound address to a file.
  if [[ -n "${DFLASH_REAL_MODEL:-}" ]]; then
    (cd "$root" && go build -o "$tmp/dflash" ./cmd/dflash)
    if [[ -n "${DFLASH_PULL_DIR:-}" ]]; then
      # A fake hub on loopback serves DFLASH_PULL_DIR as dflash/pulled, for /api/pull; the
      # server pulls into an empty cache of its own.
      (cd "$root" && go build -o "$tmp/fakehub" ./engine/ref/hubtest/fakehub)
      "$tmp/fakehub" -repo dflash/pulled -dir "$DFLASH_PULL_DIR" -addr-file "$tmp/hubaddr" 2>"$tmp/hublog" &
      hubpid=$!
      for _ in $(seq 1 100); do [[ -s "$tmp/hubaddr" ]] && break; sleep 0.05; done
      [[ -s "$tmp/hubaddr" ]] || { echo "the fake hub did not start" >&2; cat "$tmp/hublog" >&2; exit 1; }
      export HF_ENDPOINT="http://$(cat "$tmp/hubaddr")" HF_HUB_CACHE="$tmp/hub" HF_HUB_OFFLINE= HF_TOKEN=
      export DFLASH_PULL_MODEL=dflash/pulled
    fi
    "$tmp/dflash" serve --host 127.0.0.1:0 --addr-file "$tmp/addr" --model "$DFLASH_REAL_MODEL" --name real >"$tmp/out" 2>"$tmp/log" &
  else
    (cd "$root" && go build -o "$tmp/fakeserve" ./server/cmd/fakeserve)
    "$tmp/fakeserve" -addr 127.0.0.1:0 -addr-file "$tmp/addr" -token-delay 2ms 2>"$tmp/log" &
  fi
  pid=$!
  for _ in $(seq 1 100); do
    [[ -s "$tmp/addr" ]] && break
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/log" >&2; exit 1; }
    sleep 0.05
  done
  [[ -s "$tmp/addr" ]] || { echo "the server did not start" >&2; cat "$tmp/log" >&2; exit 1; }
  export DFLASH_URL="http://$(cat "$tmp/addr")"
  if [[ -n "${DFLASH_REAL_MODEL:-}" ]]; then
    export DFLASH_MODEL="real:latest"
    unset DFLASH_EXPECT_TEXT
  else
    export DFLASH_MODEL="fake:latest"
    export DFLASH_TOOLS_MODEL="fake-tools:latest"
    export DFLASH_EXPECT_TEXT="The quick brown fox jumps over the lazy dog."
  fi
fi

echo "testing $DFLASH_URL with model ${DFLASH_MODEL:-fake:latest}"
node --test --test-concurrency=1 compat.test.mjs
