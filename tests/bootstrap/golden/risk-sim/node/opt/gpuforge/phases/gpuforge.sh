#!/bin/bash
# Rendered from bootstrap/templates/phases/gpuforge.sh.j2 -- edit the template, not this output.
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
VENV="$R/opt/gpuforge/venv"
want=0.1.0
have() { [ -x "$VENV/bin/gpuforge" ] && "$VENV/bin/gpuforge" --version 2>/dev/null | sed -n 's/^gpuforge, version //p' | tr -d '\r'; }
if [ "$(have || true)" = "$want" ]; then
  log "gpuforge $want already in /opt/gpuforge/venv"
  observe gpuforge "$want"
  exit 0
fi
apt_install python3-venv
WH="$STATE/gpuforge-wheels"
rm -rf "$WH"
mkdir -p "$WH"
SRC=gpuforge-node/0.1.0/x86_64/py310/
acct=$(imds dynamic/instance-identity/document | python3 -c 'import json, sys; print(json.load(sys.stdin)["accountId"])') ||
  die "no account id in instance metadata: cannot name the stack's bucket"
BUCKET=gpuforge-risk-sim-ckpt-"$acct"-us-east-1-an
S3_SIGN=$(cat <<'PY'
import datetime, hashlib, hmac, json, sys, urllib.parse
region, url = sys.argv[1:3]
cred = json.load(sys.stdin)
now = datetime.datetime.now(datetime.timezone.utc)
stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
parts = urllib.parse.urlsplit(url)
empty = hashlib.sha256(b"").hexdigest()
hdrs = {"host": parts.netloc, "x-amz-content-sha256": empty, "x-amz-date": stamp, "x-amz-security-token": cred["Token"]}
signed = ";".join(sorted(hdrs))
canonical = "\n".join(["GET", parts.path, "", "".join(f"{k}:{hdrs[k]}\n" for k in sorted(hdrs)), signed, empty])
scope = f"{day}/{region}/s3/aws4_request"
to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
k = ("AWS4" + cred["SecretAccessKey"]).encode()
for part in (day, region, "s3", "aws4_request"):
    k = hmac.new(k, part.encode(), hashlib.sha256).digest()
sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
hdrs["authorization"] = f"AWS4-HMAC-SHA256 Credential={cred['AccessKeyId']}/{scope}, SignedHeaders={signed}, Signature={sig}"
for name, value in hdrs.items():
    if name != "host":
        print(f'header = "{name}: {value}"')
PY
)
role=$(imds meta-data/iam/security-credentials/) || die "no instance role: cannot read the stack's bucket"
get() {
  local url
  if [ -n "${GPUFORGE_S3_ENDPOINT:-}" ]; then url="${GPUFORGE_S3_ENDPOINT%/}/$BUCKET/$SRC$1"
  else url="https://$BUCKET.s3.us-east-1.amazonaws.com/$SRC$1"; fi
  imds "meta-data/iam/security-credentials/$role" | python3 -c "$S3_SIGN" us-east-1 "$url" |
    curl -fsS --retry 5 --retry-delay 3 --max-time 300 -K - -o "$WH/$1" "$url" ||
    die "cannot read s3://$BUCKET/$SRC$1 (deployed by this stack's pulumi up? node role allowed?)"
}
lock=node-x86_64-py310.txt
get "$lock"
echo 74e22af1d220f228b573bd22934663feec2a11f8723df2187399aa4726de950d"  $WH/$lock" | sha256sum -c --quiet - ||
  die "$lock: sha256 differs from the lock this node was rendered with (gpuforge $want)"
get gpuforge.txt
awk '/^# [^ ]+\.whl$/ {w = $2} /--hash=sha256:/ {sub(/.*--hash=sha256:/, ""); print w, $0}' "$WH/$lock" "$WH/gpuforge.txt" >"$WH/files"
[ -s "$WH/files" ] || die "$lock names no wheels"
while read -r whl digest; do
  get "$whl"
  echo "$digest  $WH/$whl" | sha256sum -c --quiet - || die "$whl: sha256 differs from the lock"
done <"$WH/files"
rm -rf "$VENV"
python3 -m venv "$VENV" || die "python3 -m venv /opt/gpuforge/venv failed"
"$VENV/bin/python" -m pip --isolated --disable-pip-version-check --no-cache-dir install -q \
  --require-hashes --only-binary :all: --no-index --find-links "$WH" -r "$WH/$lock" -r "$WH/gpuforge.txt" ||
  die "pip install of gpuforge $want from the hashed lock failed"
got=$(have || true)
[ "$got" = "$want" ] || die "/opt/gpuforge/venv/bin/gpuforge reports version '$got', not $want"
rm -rf "$WH"
changed "installed gpuforge $want into /opt/gpuforge/venv"
observe gpuforge "$want"
