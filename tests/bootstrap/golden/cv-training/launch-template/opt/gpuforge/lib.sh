# Rendered from bootstrap/templates/lib.sh.j2 -- edit the template, not this output.
# shellcheck shell=bash disable=SC2034 # GF, LOG and STATUS are used by the scripts that source this
set -Eeuo pipefail
R="${GPUFORGE_ROOT:-}"
GF="$R/opt/gpuforge"
LOG="$R/var/log/gpuforge/bootstrap.log"
STATE="$R/var/lib/gpuforge"
STATUS="$STATE/bootstrap-status.json"
PHASE="${GPUFORGE_PHASE:-runner}"
export DEBIAN_FRONTEND=noninteractive

log() { printf '%s [%s] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$PHASE" "$*" >&2; }
die() { log "FAILED: $*"; [ -s "$STATE/last-error" ] || printf '%s\n' "$*" >"$STATE/last-error"; exit 1; }
trap 'die "exit $? from: $BASH_COMMAND (line $LINENO)"' ERR
changed() { log "changed: $*"; touch "$STATE/changed"; }

observe() { mkdir -p "$STATE/observed"; printf '%s' "$2" >"$STATE/observed/$1"; }
workdir() { mkdir -p "$STATE/work"; mktemp -d "$STATE/work/$1.XXXXXX"; }
now() { date -u +%Y-%m-%dT%H:%M:%SZ; }

installed() {
  local got
  got=$(dpkg-query -W -f='${db:Status-Status} ${Version}' "$1" 2>/dev/null) || return 1
  [ "${got%% *}" = installed ] || return 1
  [ -z "${2:-}" ] || [ "${got#* }" = "$2" ]
}

LOCK_WAIT_S="${GPUFORGE_LOCK_WAIT_S:-1800}"
APT_LOCK=(-o "DPkg::Lock::Timeout=$LOCK_WAIT_S")
KEEP_CONF=(-o "Dpkg::Options::=--force-confdef" -o "Dpkg::Options::=--force-confold")
lock_wait() {
  python3 - "$R" "$LOCK_WAIT_S" <<'PY' || die "dpkg/apt lock still held after ${LOCK_WAIT_S}s"
import fcntl, os, struct, sys, time
root, limit = sys.argv[1], float(sys.argv[2])
locks = [root + p for p in ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock", "/var/lib/apt/lists/lock")]
fmt = "hhqqi4x"  # struct flock on LP64 Linux (x86_64, aarch64)
end, said = time.monotonic() + limit, False
while True:
    held = []
    for path in locks:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            kind, _, _, _, pid = struct.unpack(fmt, fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack(fmt, fcntl.F_WRLCK, 0, 0, 0, 0)))
        finally:
            os.close(fd)
        if kind != fcntl.F_UNLCK:
            try:
                name = open(f"/proc/{pid}/comm").read().strip()
            except OSError:
                name = "?"
            held.append(f"{path} by pid {pid} ({name})")
    if not held:
        sys.exit(0)
    if time.monotonic() > end:
        print("still held: " + "; ".join(held), file=sys.stderr)
        sys.exit(1)
    if not said:
        print("waiting for " + "; ".join(held), file=sys.stderr)
        said = True
    time.sleep(1)
PY
}

apt_update() {
  local try
  for try in 1 2 3; do
    lock_wait
    if apt-get "${APT_LOCK[@]}" update -q; then return 0; fi
    log "apt-get update failed (try $try/3)"
    sleep "${GPUFORGE_POLL_S:-5}"
  done
  die "apt-get update failed 3 times"
}

apt_install() {
  local missing=() spec
  for spec in "$@"; do
    if [[ $spec == *=* ]]; then installed "${spec%%=*}" "${spec#*=}" || missing+=("$spec")
    else installed "$spec" || missing+=("$spec"); fi
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  if [ ! -f "$STATE/apt-updated" ]; then apt_update; touch "$STATE/apt-updated"; fi
  lock_wait
  apt-get "${APT_LOCK[@]}" "${KEEP_CONF[@]}" install -y -q --no-install-recommends --allow-downgrades "${missing[@]}" ||
    die "exit $? from: apt-get install ${missing[*]}"
  changed "installed ${missing[*]}"
}

hold() {
  local held
  held=$(apt-mark showhold)
  local p
  for p in "$@"; do
    grep -qx "$p" <<<"$held" && continue
    lock_wait  # apt-mark hold goes through dpkg --set-selections, which takes the dpkg lock
    apt-mark hold "$p" >/dev/null
    changed "held $p"
  done
}

IMDS="${GPUFORGE_IMDS:-http://169.254.169.254}"
imds() {
  local token
  token=$(curl -sf --connect-timeout 2 --max-time 5 -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' "$IMDS/latest/api/token")
  curl -sf --connect-timeout 2 --max-time 5 -H "X-aws-ec2-metadata-token: $token" "$IMDS/latest/$1"
}

fetch() {
  curl -fsSL --retry 5 --retry-delay 3 --max-time 600 -o "$2" "$1"
  if [ -n "${4:-}" ]; then
    echo "$4  $2" | "${3}sum" -c --quiet - || die "$1: $3 digest mismatch (expected $4)"
  else
    log "$1: no published digest pinned in versions.yaml; running it unverified"
  fi
}

apt_key() {
  local tmp="$STATE/$3.key" dest="$R/etc/apt/keyrings/$3.gpg"
  [ -s "$dest" ] && return 0
  curl -fsSL --retry 5 --retry-delay 3 --max-time 120 -o "$tmp" "$1"
  grep -q "^fpr:*:$2:" <<<"$(gpg --show-keys --with-colons "$tmp")" || die "$1: key fingerprint is not $2"
  mkdir -p "$R/etc/apt/keyrings"
  gpg --dearmor <"$tmp" >"$dest.tmp" && mv "$dest.tmp" "$dest"
  rm -f "$tmp" "$STATE/apt-updated"
  changed "trusted key $3"
}

put() {
  if [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; then return 0; fi
  mkdir -p "$(dirname "$1")"
  printf '%s\n' "$2" >"$1.gpuforge-tmp" && mv "$1.gpuforge-tmp" "$1"
  changed "wrote ${1#"$R"}"
}

link() {
  local dst="$2/${1##*/}" rel
  rel=$(realpath -m --relative-to="$2" "$1")
  [ "$(readlink "$dst" 2>/dev/null)" = "$rel" ] && return 0
  mkdir -p "$2"
  ln -sfn "$rel" "$dst"
  changed "linked ${dst#"$R"} -> $rel"
}
