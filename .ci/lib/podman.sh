# shellcheck shell=bash
# Rootful Podman serving the Docker API, for machines that have a docker client
# but no engine and no registry (CONTRIBUTING.md says what it sets up;
# the comments below say why each setting is needed).
# Sourced by .ci/test after common.sh. Functions only; nothing runs on source.

HERDGUARD_PODMAN_SOCKET=${HERDGUARD_PODMAN_SOCKET:-/run/podman/podman.sock}
HERDGUARD_PODMAN_LOG=${HERDGUARD_PODMAN_LOG:-/run/podman/herdguard-service.log}
readonly HERDGUARD_CONTAINERS_CONF=/etc/containers/containers.conf
readonly HERDGUARD_CONF_MARKER='# managed by herdguard .ci/lib/podman.sh'

# podman_install installs podman, runc and debootstrap from Debian's archive
# unless all three are already there.
podman_install() {
	if command -v podman >/dev/null && command -v runc >/dev/null && command -v debootstrap >/dev/null &&
		command -v curl >/dev/null && command -v ip >/dev/null; then
		ci_log "podman $(podman --version | awk '{print $3}'), runc, debootstrap, curl and ip already installed"
		return 0
	fi
	ci_require_root "installing podman"
	command -v apt-get >/dev/null || ci_die "no apt-get: install podman, runc and debootstrap by hand, or start a Docker engine"
	export DEBIAN_FRONTEND=noninteractive
	local log
	log=$(mktemp /tmp/herdguard-apt.XXXXXX)
	if ! timeout 600 apt-get update >"$log" 2>&1; then
		tail -n 30 "$log" >&2
		ci_die "apt-get update failed (is Debian's archive reachable?); log: $log"
	fi
	if ! timeout 900 apt-get install -y podman runc debootstrap curl iproute2 >>"$log" 2>&1 </dev/null; then
		tail -n 30 "$log" >&2
		ci_die "apt-get install podman runc debootstrap curl iproute2 failed; log: $log"
	fi
	rm -f "$log"
	ci_log "installed $(podman --version), runc $(runc --version | awk 'NR==1 {print $3}')"
}

# podman_desired_conf prints the containers.conf this machine needs:
#   - runtime runc: the default crun fails here ("cgroups in hybrid mode not
#     supported", and setrlimit EPERM);
#   - default_ulimits at the hard limits we actually have: podman otherwise asks
#     for nofile/nproc 1048576 and, without CAP_SYS_RESOURCE, setrlimit fails.
#     nproc is capped at pid_max, which is what conmon itself runs with.
podman_desired_conf() {
	local nofile nproc pidmax
	nofile=$(ulimit -Hn)
	nproc=$(ulimit -Hu)
	pidmax=$(cat /proc/sys/kernel/pid_max)
	[[ $nofile == unlimited ]] && nofile=1048576
	if [[ $nproc == unlimited ]] || ((nproc > pidmax)); then
		nproc=$pidmax
	fi
	cat <<CONF
$HERDGUARD_CONF_MARKER (rewritten on every run; edits are lost)
# runc instead of crun, and ulimits no higher than this machine's hard limits.
[containers]
default_ulimits = [
  "nofile=$nofile:$nofile",
  "nproc=$nproc:$nproc",
]

[engine]
runtime = "runc"
CONF
}

# podman_configure writes containers.conf when it differs from what is needed
# and prints "changed" if it did (a running service must then be restarted).
podman_configure() {
	local want
	want=$(podman_desired_conf)
	if [[ -f $HERDGUARD_CONTAINERS_CONF ]] && [[ $(cat "$HERDGUARD_CONTAINERS_CONF") == "$want" ]]; then
		ci_log "$HERDGUARD_CONTAINERS_CONF already up to date"
		return 0
	fi
	ci_require_root "configuring podman"
	mkdir -p "$(dirname "$HERDGUARD_CONTAINERS_CONF")"
	if [[ -f $HERDGUARD_CONTAINERS_CONF ]] && ! grep -qF "$HERDGUARD_CONF_MARKER" "$HERDGUARD_CONTAINERS_CONF"; then
		cp -p "$HERDGUARD_CONTAINERS_CONF" "$HERDGUARD_CONTAINERS_CONF.herdguard-backup"
		ci_log "saved the existing $HERDGUARD_CONTAINERS_CONF as $HERDGUARD_CONTAINERS_CONF.herdguard-backup"
	fi
	printf '%s\n' "$want" >"$HERDGUARD_CONTAINERS_CONF"
	ci_log "wrote $HERDGUARD_CONTAINERS_CONF:"
	sed 's/^/    /' "$HERDGUARD_CONTAINERS_CONF" >&2
	HERDGUARD_PODMAN_CONF_CHANGED=1
}

# podman_api_ok succeeds when the Docker-compatible API answers its ping.
podman_api_ok() {
	[[ -S $HERDGUARD_PODMAN_SOCKET ]] &&
		[[ $(curl -fsS --max-time 5 --unix-socket "$HERDGUARD_PODMAN_SOCKET" http://d/_ping 2>/dev/null) == OK ]]
}

# podman_service_stop stops a service this script started earlier (its pid is
# kept next to the socket), saying why ($1). It never touches a service started
# otherwise.
podman_service_stop() {
	local pidfile=${HERDGUARD_PODMAN_SOCKET%/*}/herdguard-service.pid pid
	[[ -f $pidfile ]] || return 0
	pid=$(cat "$pidfile")
	if kill -0 "$pid" 2>/dev/null && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == podman ]]; then
		ci_log "stopping the podman API service (pid $pid): $1"
		kill "$pid"
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
	fi
	rm -f "$pidfile"
}

# podman_service_cwd_gone succeeds when the service this script started runs
# in a directory deleted since (the clone whose .ci/test started it, removed):
# it still answers its ping, but conmon fails every container start ("Failed
# to get working directory", seen as "write child: broken pipe").
podman_service_cwd_gone() {
	local pidfile=${HERDGUARD_PODMAN_SOCKET%/*}/herdguard-service.pid
	[[ -f $pidfile ]] && [[ $(readlink "/proc/$(cat "$pidfile")/cwd" 2>/dev/null) == *" (deleted)" ]]
}

# podman_service_ensure starts `podman system service` detached from this
# script (setsid + nohup, stdin from /dev/null, working directory /) so that it
# outlives the step and the clone, and waits until the API answers. A service
# that already answers is reused.
podman_service_ensure() {
	local dir=${HERDGUARD_PODMAN_SOCKET%/*} pid start
	if [[ ${HERDGUARD_PODMAN_CONF_CHANGED:-0} == 1 ]]; then
		podman_service_stop "to apply the new configuration"
	elif podman_service_cwd_gone; then
		podman_service_stop "its working directory was deleted, and it cannot start containers without one"
	fi
	if podman_api_ok; then
		ci_log "podman API already serving on $HERDGUARD_PODMAN_SOCKET"
		return 0
	fi
	ci_require_root "starting the podman API service"
	mkdir -p "$dir"
	rm -f "$HERDGUARD_PODMAN_SOCKET" # a stale socket from a killed service
	start=$(ci_now)
	(cd / && exec setsid nohup podman system service --time=0 "unix://$HERDGUARD_PODMAN_SOCKET" \
		>>"$HERDGUARD_PODMAN_LOG" 2>&1 </dev/null) &
	pid=$!
	echo "$pid" >"$dir/herdguard-service.pid"
	for _ in $(seq 300); do
		if podman_api_ok; then
			ci_log "podman API serving on $HERDGUARD_PODMAN_SOCKET (pid $pid) after $(ci_elapsed "$start") s; log: $HERDGUARD_PODMAN_LOG"
			return 0
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 20 "$HERDGUARD_PODMAN_LOG" >&2 || true
			ci_die "podman system service exited; see $HERDGUARD_PODMAN_LOG"
		fi
		sleep 0.1
	done
	tail -n 20 "$HERDGUARD_PODMAN_LOG" >&2 || true
	ci_die "podman API did not answer on $HERDGUARD_PODMAN_SOCKET within 30 s"
}

# podman_bridge_name prints the Linux bridge of podman's default network.
podman_bridge_name() {
	local br
	br=$(podman network inspect podman --format '{{.NetworkInterface}}' 2>/dev/null || true)
	printf '%s' "${br:-podman0}"
}

# podman_keeper_name is this run's keeper container (one per run, so that two
# runs at once do not remove each other's).
podman_keeper_name() {
	printf 'herdguard-keeper-%s' "$$"
}

# podman_force_remove ID removes a container whatever its state. A container
# whose processes were killed behind podman's back (a session's processes are
# ended before CI starts) is stuck in "Stopping": the first rm fails with
# "container state improper", the second removes it.
podman_force_remove() {
	podman rm -f -t 0 "$1" >/dev/null 2>&1 || podman rm -f -t 0 "$1" >/dev/null 2>&1 ||
		ci_log "warning: could not remove container $1"
}

# podman_remove_stale_containers removes what runs that have ended (killed
# without cleaning up) left behind: their keepers (label herdguard.keeper.pid)
# and their test containers (label herdguard.ci.run=<pid>-<time>, set by the
# integration tests). Containers of runs still alive, and containers that are
# not herdguard's, are left alone.
podman_remove_stale_containers() {
	local id owner pid
	while read -r id owner; do
		[[ -n $id ]] || continue
		pid=${owner%%-*}
		if ! [[ $pid =~ ^[0-9]+$ ]] || ! kill -0 "$pid" 2>/dev/null; then
			ci_log "removing container $id left behind by run ${owner:-?}, which is gone"
			podman_force_remove "$id"
		fi
	done < <(
		podman ps -a --filter label=herdguard.keeper=1 --format '{{.ID}} {{index .Labels "herdguard.keeper.pid"}}'
		podman ps -a --filter label=herdguard.ci.run --format '{{.ID}} {{index .Labels "herdguard.ci.run"}}'
	)
}

# podman_keeper_start IMAGE starts one idle container for the whole run and
# pins the bridge's MAC address. Without both, the podman0 bridge takes the MAC
# of one of its ports, changes it when containers are removed, and running
# containers (with the old gateway MAC in their ARP cache) stall for 27-63 s.
podman_keeper_start() {
	local image=$1 name br mac
	name=$(podman_keeper_name)
	podman_remove_stale_containers
	podman rm -f -t 0 "$name" >/dev/null 2>&1 || true
	podman run -d --name "$name" --label herdguard.keeper=1 --label "herdguard.keeper.pid=$$" \
		--entrypoint sleep "$image" infinity >/dev/null ||
		ci_die "could not start the keeper container from $image"
	ci_at_exit "podman_keeper_stop"
	br=$(podman_bridge_name)
	[[ -e /sys/class/net/$br/address ]] || ci_die "bridge $br not found after starting $name (podman network inspect podman)"
	mac=$(cat "/sys/class/net/$br/address")
	ip link set "$br" address "$mac" || ci_die "could not pin the MAC address of bridge $br"
	ci_log "keeper container $name running; bridge $br MAC pinned to $mac (addr_assign_type $(cat "/sys/class/net/$br/addr_assign_type"))"
}

# podman_keeper_stop removes this run's keeper (registered with ci_at_exit).
podman_keeper_stop() {
	local name
	name=$(podman_keeper_name)
	if podman rm -f -t 0 "$name" >/dev/null 2>&1; then
		ci_log "removed keeper container $name"
	fi
}

# podman_remove_run_containers RUN removes the containers that test binaries of
# run RUN left behind (label herdguard.ci.run=RUN; see integration/main_test.go).
# A binary that ends normally has removed its own already.
podman_remove_run_containers() {
	local ids id
	ids=$(podman ps -aq --filter "label=herdguard.ci.run=$1" 2>/dev/null || true)
	if [[ -n $ids ]]; then
		ci_log "removing containers left behind by this run: $(echo "$ids" | tr '\n' ' ')"
		for id in $ids; do
			podman_force_remove "$id"
		done
	fi
}
