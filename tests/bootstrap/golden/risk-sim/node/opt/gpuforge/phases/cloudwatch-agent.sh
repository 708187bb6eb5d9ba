#!/bin/bash
# Rendered from bootstrap/templates/phases/cloudwatch-agent.sh.j2 -- edit the template, not this output.
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
cwa="$R/opt/aws/amazon-cloudwatch-agent"
ver=1.300072.0b1766
fpr=937616F3450B7D806CBD9725D58167303B789C72
if [ "$(cat "$cwa/bin/CWAGENT_VERSION" 2>/dev/null)" != "$ver" ]; then
  tmp=$(workdir cwagent)
  get() { curl -fsSL --retry 5 --retry-delay 3 --max-time 600 -o "$tmp/$1" "$2"; }
  get key.gpg https://amazoncloudwatch-agent.s3.amazonaws.com/assets/amazon-cloudwatch-agent.gpg
  get agent.deb https://amazoncloudwatch-agent.s3.amazonaws.com/ubuntu/amd64/1.300072.0b1766/amazon-cloudwatch-agent.deb
  get agent.deb.sig https://amazoncloudwatch-agent.s3.amazonaws.com/ubuntu/amd64/1.300072.0b1766/amazon-cloudwatch-agent.deb.sig
  grep -q "^fpr:*:$fpr:" <<<"$(gpg --show-keys --with-colons "$tmp/key.gpg")" || die "CloudWatch agent key fingerprint is not $fpr"
  mkdir -m 0700 "$tmp/gnupg"
  gpg --homedir "$tmp/gnupg" --batch --quiet --import "$tmp/key.gpg"
  sig=$(gpg --homedir "$tmp/gnupg" --batch --status-fd 1 --verify "$tmp/agent.deb.sig" "$tmp/agent.deb" 2>/dev/null || true)
  grep -Eq "^\[GNUPG:\] VALIDSIG .* $fpr\$" <<<"$sig" || die "CloudWatch agent $ver: signature does not verify with key $fpr"
  log "CloudWatch agent $ver: signature verified with key $fpr"
  lock_wait
  dpkg -i "$tmp/agent.deb" || die "dpkg -i amazon-cloudwatch-agent $ver failed"
  rm -rf "$tmp"
  [ "$(cat "$cwa/bin/CWAGENT_VERSION" 2>/dev/null)" = "$ver" ] || die "CloudWatch agent is not $ver after installing it"
  changed "installed CloudWatch agent $ver"
fi
applied="$STATE/cloudwatch-agent.applied.json"
if ! cmp -s "$R"/etc/gpuforge/cloudwatch-agent.json "$applied" || ! systemctl is-active amazon-cloudwatch-agent >/dev/null 2>&1; then
  "$cwa/bin/amazon-cloudwatch-agent-ctl" -a fetch-config -m ec2 -s -c file:/etc/gpuforge/cloudwatch-agent.json >/dev/null ||
    die "amazon-cloudwatch-agent-ctl could not load /etc/gpuforge/cloudwatch-agent.json"
  cp "$R"/etc/gpuforge/cloudwatch-agent.json "$applied"
  changed "CloudWatch agent: loaded /etc/gpuforge/cloudwatch-agent.json"
fi
systemctl is-enabled amazon-cloudwatch-agent >/dev/null 2>&1 || { systemctl enable amazon-cloudwatch-agent; changed "enabled CloudWatch agent"; }
systemctl is-active amazon-cloudwatch-agent >/dev/null 2>&1 || die "amazon-cloudwatch-agent is not running (journalctl -u amazon-cloudwatch-agent)"
observe cloudwatch_agent "$(cat "$cwa/bin/CWAGENT_VERSION")"
