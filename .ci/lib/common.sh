# shellcheck shell=bash
# Shared helpers for the .ci scripts: logging, step timing, clean-up at exit.
# Sourced, never executed. Callers run under `set -euo pipefail`.
#
# Steps are plain function calls so that `set -e` stays in force inside them
# (bash ignores errexit inside anything called from `if`, `&&` or `||`). A
# failing command therefore ends the script at once; the EXIT handler below
# then names the step that was running and how long it had run.

# Command substitutions inherit set -e, so a failure inside $(...) fails too.
shopt -s inherit_errexit

CI_CURRENT_STEP=""
CI_STEP_START=""
CI_CLEANUPS=()

# ci_log prints one line to stderr, prefixed so CI logs are easy to grep.
ci_log() {
	printf '[herdguard-ci %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2
}

# ci_die prints an error and exits non-zero. Every deliberate failure ends
# here so the last lines of a failed CI log say what broke.
ci_die() {
	printf '[herdguard-ci %s] ERROR: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2
	exit 1
}

# ci_now prints the wall clock in seconds with microseconds.
ci_now() {
	printf '%s' "${EPOCHREALTIME:-$(date +%s.%N)}"
}

# ci_elapsed START prints the seconds since START (from ci_now), one decimal.
ci_elapsed() {
	awk -v a="$1" -v b="$(ci_now)" 'BEGIN { printf "%.1f", b - a }'
}

# ci_step NAME CMD... runs CMD as one timed step. Do not call it from a
# condition (if/&&/||): that would switch off set -e inside CMD.
ci_step() {
	CI_CURRENT_STEP=$1
	CI_STEP_START=$(ci_now)
	shift
	ci_log "step '$CI_CURRENT_STEP': start"
	"$@"
	ci_log "step '$CI_CURRENT_STEP': done in $(ci_elapsed "$CI_STEP_START") s"
	CI_CURRENT_STEP=""
}

# ci_at_exit CMD registers a clean-up command; they run in reverse order when
# the script exits, however it exits.
ci_at_exit() {
	CI_CLEANUPS+=("$1")
}

ci__on_exit() {
	local rc=$? i
	if ((rc != 0)) && [[ -n $CI_CURRENT_STEP ]]; then
		printf '[herdguard-ci %s] step %s: FAILED (exit %d) after %s s\n' \
			"$(date -u +%H:%M:%S)" "'$CI_CURRENT_STEP'" "$rc" "$(ci_elapsed "$CI_STEP_START")" >&2
	fi
	for ((i = ${#CI_CLEANUPS[@]} - 1; i >= 0; i--)); do
		eval "${CI_CLEANUPS[i]}" || true
	done
	exit "$rc"
}
trap ci__on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ci_require_root fails unless running as root (apt-get, rootful podman).
ci_require_root() {
	if [[ $(id -u) -ne 0 ]]; then
		ci_die "$1 needs root (apt-get and rootful podman). Run as root, or start a Docker engine so that 'docker info' works."
	fi
}

# ci_ensure_go puts the Go toolchain on PATH (it lives in /usr/local/go on
# this kind of machine, which a bare CI environment may not have on PATH).
ci_ensure_go() {
	if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then
		export PATH=$PATH:/usr/local/go/bin
	fi
	command -v go >/dev/null || ci_die "go not found on PATH or in /usr/local/go/bin"
}

# ci_module_patterns prints, one per line, the package patterns of every
# module go.work uses: ./... (the root module) and ./DIR/... for each
# nested one. In workspace mode ./... at the root still stops at the nested
# modules' directories, so "the whole tree" is this list. Run at the root.
ci_module_patterns() {
	local dirs dir
	dirs=$(GOWORK="$PWD/go.work" go list -m -f '{{.Dir}}')
	printf '%s\n' ./...
	while IFS= read -r dir; do
		dir=$(realpath --relative-to="$PWD" "$dir")
		[[ $dir == . ]] || printf './%s/...\n' "$dir"
	done <<<"$dirs"
}
