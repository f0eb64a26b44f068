#!/usr/bin/env bash
# bench-antrea.sh: kovs's BenchmarkPolicyShapes beside Antrea's own controller perf test
# (pkg/controller/networkpolicy, commit fc70f2b), on the same machine in one run: RUNS
# interleaved runs of each shape for each controller, medians, and kovs/Antrea ratios of
# time, peak Go heap and peak RSS.
#
#   shape (a): kovs BenchmarkPolicyShapes/a-many-small-namespaces
#              Antrea TestInitXLargeScaleWithSmallNamespaces (25k ns, 100k pods, 75k policies)
#   shape (b): kovs BenchmarkPolicyShapes/b-one-big-namespace
#              Antrea TestInitXLargeScaleWithOneNamespace (1 ns, 10k pods, 10k policies)
#
# What each number is: time is kovs's headline "s" (informers started to every node's
# snapshot built) and Antrea's TIME(s) (informers started to its last computation; its
# test subtracts its 3 s idle wait); heap is each test's sampled peak of
# runtime.MemStats.Alloc (kovs every 10 ms, Antrea every 500 ms, which can only miss
# peaks of Antrea's); RSS is, for kovs, the benchmark's VmHWM from the start of the
# informers (the fake clientset's objects resident, their generation's garbage returned
# to the OS), for Antrea the whole test process's peak (GNU time), generation included:
# Antrea's test has no hook to reset it. One shape per process.
#
# Antrea's test is built in $KOVS_CACHE/antrea-fc70f2b with its own go.mod, except that
# antrea.io/libOpenflow and antrea.io/ofnet, which the Go module proxy refuses (403 on
# antrea.io), are replaced by local source trees. The controller code is unchanged.
# Sources (each a directory; cloned from GitHub at the pinned versions when unset):
#   ANTREA_SRC       antrea at fc70f2b
#   OFNET_SRC        antrea.io/ofnet (pinned v0.15.1)
#   LIBOPENFLOW_SRC  antrea.io/libOpenflow (pinned v0.17.0)
# An ofnet older than v0.15 lacks ofctrl.FlowMatch.CtZone, which Antrea's agent-side
# OpenFlow package (compiled into the test, never run by it) sets: the script then adds
# that one field to the build's copy, and says so.
set -euo pipefail

RUNS=${RUNS:-3}
ATTEMPTS=${ANTREA_ATTEMPTS:-3}
GO=${GO:-go}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${KOVS_CACHE:-$HOME/.cache/kovs}/antrea-fc70f2b
ANTREA_COMMIT=fc70f2bb7037f398196fd42210d34800cb6aa398
NICE=${NICE:-nice -n 10}

die() { echo "bench-antrea: $*" >&2; exit 1; }

# source NAME DIR_VAR URL REF: a copy of the source tree in $CACHE/NAME.
source_tree() {
	local name=$1 dir=$2 url=$3 ref=$4
	if [[ -n $dir ]]; then
		[[ -d $dir ]] || die "$name source $dir is not a directory"
		rm -rf "${CACHE:?}/$name"
		mkdir -p "$CACHE/$name"
		cp -a "$dir/." "$CACHE/$name/"
	elif [[ ! -d $CACHE/$name ]]; then
		# A clone or an extraction cut short is finished by the next run, never taken for
		# a tree: the tree appears (mv) only once it is whole.
		[[ -d $CACHE/$name.git ]] || git clone --quiet "$url" "$CACHE/$name.git" ||
			die "clone $url failed: set the ${name^^} source directory (see the header)"
		rm -rf "$CACHE/$name.tmp"
		mkdir -p "$CACHE/$name.tmp"
		git -C "$CACHE/$name.git" archive "$ref" | tar -x -C "$CACHE/$name.tmp" || die "extracting $name $ref failed"
		mv "$CACHE/$name.tmp" "$CACHE/$name"
	fi
}

build_antrea() {
	mkdir -p "$CACHE"
	if [[ -x $CACHE/antrea-np.test && -z ${ANTREA_SRC:-}${OFNET_SRC:-}${LIBOPENFLOW_SRC:-} ]]; then
		return
	fi
	source_tree antrea "${ANTREA_SRC:-}" https://github.com/antrea-io/antrea "$ANTREA_COMMIT"
	source_tree ofnet "${OFNET_SRC:-}" https://github.com/antrea-io/ofnet v0.15.1
	source_tree libopenflow "${LIBOPENFLOW_SRC:-}" https://github.com/antrea-io/libOpenflow v0.17.0
	if ! grep -q 'CtZone ' "$CACHE/ofnet/ofctrl/fgraphFlow.go"; then
		echo "bench-antrea: this ofnet lacks FlowMatch.CtZone (added in v0.15): adding the field to the build's copy" >&2
		sed -i 's|^\(\tCtMark  *uint32 .*\)$|\1\n\tCtZone *uint16 // added by kovs hack/bench-antrea.sh for building only|' "$CACHE/ofnet/ofctrl/fgraphFlow.go"
		grep -q 'CtZone ' "$CACHE/ofnet/ofctrl/fgraphFlow.go" || die "could not add CtZone to ofnet's FlowMatch"
	fi
	(cd "$CACHE/antrea" &&
		$GO mod edit -replace antrea.io/ofnet="$CACHE/ofnet" -replace antrea.io/libOpenflow="$CACHE/libopenflow" &&
		$GO test -c -o "$CACHE/antrea-np.test" ./pkg/controller/networkpolicy) || die "building Antrea's controller test failed (above)"
}

# run_kovs SHAPE: prints "seconds heapMiB rssMiB". The RSS is the benchmark's own peak
# (VmHWM, reset once the objects are generated): the process's maximum would be that of
# the benchmark's later informers-only control run, which resets VmHWM again.
run_kovs() {
	local out
	out=$($NICE "$CACHE/kovs-np.test" -test.run '^$' -test.bench "BenchmarkPolicyShapes/$1" -test.benchtime 1x 2>&1) ||
		die "kovs $1: $out"
	echo "$out" >>"$CACHE/kovs.log"
	awk '/^BenchmarkPolicyShapes/ {
		for (i = 2; i < NF; i++) { if ($(i+1) == "s") t = $i; if ($(i+1) == "MiB-heap-peak") h = $i; if ($(i+1) == "MiB-rss-peak") r = $i }
		printf "%s %s %.0f\n", t, h, r }' <<<"$out"
}

# run_antrea TEST: prints "seconds heapMiB rssMiB". Antrea's test stops timing once its
# controller has been idle for 3 s; on a loaded machine it can be idle that long before
# it has taken every policy, or between taking them and computing them, and then reports
# a fraction of the work: such a run (fewer addNetworkPolicy executions, or fewer
# internal NetworkPolicy events, than policies) is run again, up to ANTREA_ATTEMPTS times
# in all.
run_antrea() {
	local out rss attempt
	for attempt in $(seq "$ATTEMPTS"); do
		# The test fails when it takes longer than its own time limit (10-15 s, which a
		# loaded machine exceeds); its summary is printed either way.
		out=$(cd "$CACHE/antrea/pkg/controller/networkpolicy" && $NICE /usr/bin/time -f '%M' -o "$CACHE/rss" \
			"$CACHE/antrea-np.test" -test.run "^$1\$" -test.v -test.count 1 2>&1) || true
		echo "$out" >>"$CACHE/antrea.log"
		grep -qE 'NAMESPACES +ENTITIES' <<<"$out" || die "Antrea $1 printed no summary: $out"
		if awk '/addNetworkPolicy, executions:/ { n = $(NF-2) + 0 } /NAMESPACES +ENTITIES/ { getline; want = $3; events = $7 }
			END { exit !(n == want && events >= want) }' <<<"$out"; then
			rss=$(tail -1 "$CACHE/rss")
			awk -v rss="$rss" '/NAMESPACES +ENTITIES/ { getline; printf "%s %s %.0f\n", $4, $5, rss / 1024 }' <<<"$out"
			return
		fi
		echo "bench-antrea: Antrea $1 stopped before computing every policy (idle 3 s on a loaded machine), attempt $attempt" >&2
	done
	die "Antrea $1 never computed every policy in $ATTEMPTS attempts (output in $CACHE/antrea.log)"
}

# record WHO SHAPE COMMAND...: appends "WHO SHAPE seconds heap rss" to the results, or
# stops if the command did not measure all three.
record() {
	local who=$1 shape=$2 line
	shift 2
	line=$("$@") || exit 1
	[[ $line =~ ^[0-9.]+\ [0-9.]+\ [0-9.]+$ ]] || die "$who $shape: no measurement (got '$line')"
	echo "$who $shape $line" >>"$results"
	echo "bench-antrea:   $who ($shape): $line (s, heap MiB, RSS MiB)" >&2
}

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

main() {
	[[ -x /usr/bin/time ]] || die "needs GNU time (/usr/bin/time; apt-get install time)"
	build_antrea
	(cd "$ROOT" && $GO test -c -o "$CACHE/kovs-np.test" ./go-controller/pkg/controller/networkpolicy)
	results=$CACHE/results
	: >"$results"
	: >"$CACHE/kovs.log"
	: >"$CACHE/antrea.log"
	for run in $(seq "$RUNS"); do
		echo "bench-antrea: run $run of $RUNS" >&2
		record kovs a run_kovs a-many-small-namespaces
		record antrea a run_antrea TestInitXLargeScaleWithSmallNamespaces
		record kovs b run_kovs b-one-big-namespace
		record antrea b run_antrea TestInitXLargeScaleWithOneNamespace
	done
	echo "Policy compute, kovs beside Antrea (fc70f2b), medians of $RUNS interleaved runs:"
	for shape in a b; do
		local k=() a=()
		for col in 3 4 5; do
			k+=("$(awk -v s=$shape -v c=$col '$1 == "kovs" && $2 == s { print $c }' "$results" | median)")
			a+=("$(awk -v s=$shape -v c=$col '$1 == "antrea" && $2 == s { print $c }' "$results" | median)")
		done
		awk -v s=$shape -v kt="${k[0]}" -v kh="${k[1]}" -v kr="${k[2]}" -v at="${a[0]}" -v ah="${a[1]}" -v ar="${a[2]}" 'BEGIN {
			printf "  shape (%s): kovs %.2f s, heap %.0f MiB, RSS %.0f MiB; Antrea %.2f s, heap %.0f MiB, RSS %.0f MiB\n", s, kt, kh, kr, at, ah, ar
			printf "             kovs/Antrea: time %.2fx, heap %.2fx, RSS %.2fx (goal: <= 0.25x, <= 0.33x, <= 0.33x)\n", kt / at, kh / ah, kr / ar }'
	done
	echo "  (every run: $results)"
}

main "$@"
