#!/usr/bin/env bash
# Checks, without Docker, that the Dockerfile's runtime stage installs every shared library
# the built binaries link, so the image cannot fail at start with "error while loading
# shared libraries".
#
#   bash scripts/check-image-libs.sh [BINARY ...]     (default: build/bin/clusterd build/bin/noded)
#
# How: `ldd` lists each binary's libraries as resolved on this machine (Debian 12, the
# image's base); `dpkg -S` names the package that owns each file; every such package must be
# in the runtime stage's `apt-get install` list or in BASE_PACKAGES below. Also checks that
# each listed package exists in the apt lists and that the build stage installs every
# package of scripts/deps.sh that a build needs. Exits non-zero naming what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# Packages every debian:12-slim image already has: they are "required" priority or needed
# by apt itself, so the runtime stage does not list them. Keep this list short.
BASE_PACKAGES=(libc6 libgcc-s1 libstdc++6)
# Packages of scripts/deps.sh that the image build does not need: compiler cache, the
# downloader, Go (only the host-side tests and grpcurl use them), and clang with its
# runtime, clang-format and clang-tidy (fuzzers, lint), and the status page's browser
# test (Chromium, its driver and Selenium).
HOST_ONLY_PACKAGES=(ccache mold curl golang-go python3-venv clang libclang-rt-14-dev clang-format clang-tidy openssl
  chromium chromium-driver python3-selenium)

DOCKERFILE=Dockerfile
binaries=("$@")
((${#binaries[@]})) || binaries=(build/bin/clusterd build/bin/noded)

fail=0
err() { echo "check-image-libs: FAIL: $*" >&2; fail=1; }

for b in "${binaries[@]}"; do
  [[ -x $b ]] || { echo "check-image-libs: $b not built (run scripts/build.sh first)" >&2; exit 1; }
done
. /etc/os-release 2>/dev/null || true
if [[ ${ID:-} != debian || ${VERSION_ID:-} != 12 ]]; then
  echo "check-image-libs: WARNING: this machine is ${PRETTY_NAME:-unknown}, the image is Debian 12;" \
       "package names below are this machine's" >&2
fi

# Prints the packages of one stage's `apt-get install`, one a line (STAGE: the AS name).
stage_packages() {
  python3 - "$DOCKERFILE" "$1" <<'PY'
import re, sys
path, want = sys.argv[1], sys.argv[2]
lines, cur = [], ""
for raw in open(path):
    line = raw.rstrip("\n")
    if line.lstrip().startswith("#"):
        continue  # comments inside a continued RUN are dropped, as Docker does
    if line.endswith("\\"):
        cur += line[:-1] + " "
        continue
    lines.append(cur + line)
    cur = ""
stage, found = None, False
for line in lines:
    m = re.match(r"\s*FROM\s+\S+(?:\s+AS\s+(\S+))?", line, re.I)
    if m:
        stage = (m.group(1) or "").lower()
        continue
    if stage != want or not re.match(r"\s*RUN\s", line, re.I):
        continue
    for cmd in re.split(r"&&|;|\|\|", line):
        toks = cmd.split()
        if "apt-get" in toks and "install" in toks:
            found = True
            for t in toks[toks.index("install") + 1:]:
                if not t.startswith("-"):
                    print(t)
if not found:
    sys.exit(f"no 'apt-get install' in stage {want!r} of {path}")
PY
}

mapfile -t runtime_pkgs < <(stage_packages runtime)
mapfile -t build_pkgs < <(stage_packages build)
((${#runtime_pkgs[@]})) || { err "could not read the runtime stage's packages from $DOCKERFILE"; exit 1; }
echo "check-image-libs: runtime stage installs: ${runtime_pkgs[*]}"

in_list() { local x=$1; shift; local y; for y in "$@"; do [[ $x == "$y" ]] && return 0; done; return 1; }

# Every library of every binary, as ldd resolves it on this machine: "binary lib path" lines.
libs=()
for b in "${binaries[@]}"; do
  ldd_out=$(ldd "$b") || { err "ldd $b failed"; continue; }
  while read -r line; do
    [[ -z $line || $line == *linux-vdso.so* ]] && continue
    lib=${line%% *}
    if [[ $line == *"not found"* ]]; then
      err "$b: $lib is not found on this machine"
      continue
    fi
    if [[ $line == *"=>"* ]]; then path=$(awk '{print $3}' <<<"$line"); else path=$lib; fi
    libs+=("$b $lib $path")
  done <<<"$ldd_out"
done

# The paths merged-/usr Debian may have recorded for a file, most likely first.
candidates() {
  local p=$1 real
  real=$(readlink -f "$p")
  printf '%s\n' "$p" "$real" "${p#/usr}" "/usr$p" "${real#/usr}" "/usr$real"
}
# One dpkg -S for every candidate path of every library (one call per path took about a
# minute for the two binaries): owner[path] is the first package that owns it.
declare -A owner=()
mapfile -t all_paths < <(for l in "${libs[@]}"; do candidates "${l##* }"; done | sort -u)
if ((${#all_paths[@]})); then
  while IFS= read -r line; do
    [[ $line == diversion* || $line != *": /"* ]] && continue
    pkg=${line%%: /*}
    pkg=${pkg%%,*}
    pkg=${pkg%%:*}
    owner[${line#*: }]=$pkg
  done < <(dpkg -S "${all_paths[@]}" 2>/dev/null || true)
fi

declare -A needed=()   # package -> a library that needs it
for l in "${libs[@]}"; do
  read -r b lib path <<<"$l"
  pkg=""
  while read -r cand; do
    [[ -n ${owner[$cand]:-} ]] && { pkg=${owner[$cand]}; break; }
  done < <(candidates "$path")
  if [[ -z $pkg ]]; then
    err "$b: $lib ($path) belongs to no Debian package: the image cannot install it"
    continue
  fi
  [[ -n ${needed[$pkg]:-} ]] || needed[$pkg]="$lib (${b##*/})"
done

for pkg in $(printf '%s\n' "${!needed[@]}" | sort); do
  if in_list "$pkg" "${runtime_pkgs[@]}"; then
    echo "  ok   $pkg  (${needed[$pkg]})"
  elif in_list "$pkg" "${BASE_PACKAGES[@]}"; then
    echo "  base $pkg  (${needed[$pkg]})"
  else
    err "package $pkg (provides ${needed[$pkg]}) is missing from the runtime stage of $DOCKERFILE"
  fi
done
for pkg in "${runtime_pkgs[@]}"; do
  [[ -n ${needed[$pkg]:-} ]] || echo "  note: runtime package $pkg provides no library the binaries link"
done

# Every listed package must exist in Debian 12 (catches typos), when apt lists are present.
if compgen -G "/var/lib/apt/lists/*_Packages*" >/dev/null; then
  # One apt-cache call for every package: "pkg candidate" for each one apt knows.
  declare -A candidate=()
  while read -r pkg cand; do candidate[$pkg]=$cand; done < <(
    apt-cache policy "${runtime_pkgs[@]}" "${build_pkgs[@]}" 2>/dev/null |
      awk '/^[^ ].*:$/ {p = substr($0, 1, length($0) - 1); sub(/:amd64$/, "", p)} /^  Candidate:/ {print p, $2}')
  for pkg in "${runtime_pkgs[@]}" "${build_pkgs[@]}"; do
    cand=${candidate[$pkg]:-}
    [[ -n $cand && $cand != "(none)" ]] || err "package $pkg in $DOCKERFILE is unknown to apt"
  done
else
  echo "check-image-libs: no apt lists; skipped the package-name check (run apt-get update)"
fi

# The build stage must install what scripts/deps.sh installs for a build.
mapfile -t deps_pkgs < <(sed -n '/^APT_PACKAGES=(/,/^)/p' scripts/deps.sh | sed '1s/.*(//; $d' | tr -s ' \t' '\n' | sed '/^$/d')
for pkg in "${deps_pkgs[@]}"; do
  in_list "$pkg" "${build_pkgs[@]}" "${HOST_ONLY_PACKAGES[@]}" ||
    err "scripts/deps.sh installs $pkg but the build stage of $DOCKERFILE does not (add it, or to HOST_ONLY_PACKAGES)"
done

if ((fail)); then exit 1; fi
echo "check-image-libs: ok (${#needed[@]} packages for $(printf '%s ' "${binaries[@]##*/}")- all provided)"
