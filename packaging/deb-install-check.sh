#!/usr/bin/env bash
# deb-install-check.sh: install the .deb for real with apt, under a real
# systemd 252 (PID 1 of private namespaces on a throwaway overlay of this
# machine's root: packaging/lib/nsroot.sh), check what the package promises,
# and purge it again.
#
# By default it packages stand-in binaries (packaging/testdata/standin: socket
# activation, READY=1, and a report of uid, groups and credentials) with the
# real units, scripts, polkit rule and worker image, so it checks the
# packaging itself: users, directories, modes, enabled units, the API socket,
# socket activation, the polkit rule through systemd's own D-Bus checks,
# LoadCredential names, the hardening against a static Go binary, the reaper,
# the image load, and a clean purge. DEB=path checks a given package instead
# (the checks that need the stand-ins' reports are skipped).
#
# Usage: packaging/deb-install-check.sh   (root; prints SKIP and exits 0 when
# the machine cannot boot the namespace)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=lib/nsroot.sh
source "$here/lib/nsroot.sh"

reason=$(nsroot_skip_reason)
if [[ -n $reason ]]; then echo "SKIP: deb-install-check: $reason"; exit 0; fi
for t in apt-get dpkg-deb go; do
  command -v "$t" >/dev/null || { echo "SKIP: deb-install-check: $t not found"; exit 0; }
done
[[ -x /usr/lib/polkit-1/polkitd ]] || { echo "SKIP: deb-install-check: polkitd not installed"; exit 0; }
command -v dockerd >/dev/null || { echo "SKIP: deb-install-check: docker.io not installed"; exit 0; }

pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
# expect DESCRIPTION CMD...: CMD (run inside the namespace) must succeed.
expect() { local d=$1; shift; if out=$(nsroot_exec "$@" 2>&1); then ok "$d"; else bad "$d: $out"; fi; }
# refuse DESCRIPTION CMD...: CMD (inside) must fail.
refuse() { local d=$1; shift; if out=$(nsroot_exec "$@" 2>&1); then bad "$d: succeeded: $out"; else ok "$d"; fi; }
# equal DESCRIPTION WANT CMD...: CMD's output (inside) must equal WANT.
equal() {
  local d=$1 want=$2; shift 2
  local got; got=$(nsroot_exec "$@" 2>&1)
  if [[ $got == "$want" ]]; then ok "$d ($got)"; else bad "$d: got '$got', want '$want'"; fi
}

work=$(mktemp -d /tmp/rtsb-debcheck.XXXXXX)
cleanup() { nsroot_teardown; rm -rf "$work"; }
trap cleanup EXIT

standin=1
if [[ -n ${DEB:-} ]]; then
  standin=0
  deb=$DEB
else
  # Stand-in binaries and, when the real archive is not built, a tiny image.
  mkdir -p "$work/bin" "$work/out"
  (cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$work/standin" ./packaging/testdata/standin) ||
    { echo "FAIL: cannot build the stand-in"; exit 1; }
  for b in sandbox-host sandbox-broker sandbox-reaper sandbox-worker sandbox-nats; do cp "$work/standin" "$work/bin/$b"; done
  # The fleet section runs the real engine and its configuration step.
  mkdir -p "$work/real"
  (cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$work/real/" ./cmd/sandbox-nats ./cmd/sandbox-host) ||
    { echo "FAIL: cannot build sandbox-nats and sandbox-host"; exit 1; }
  image=$root/dist/worker-image.tar
  if [[ ! -f $image ]]; then
    image=$work/worker-image.tar
    mkdir -p "$work/img/layer" && cp "$work/standin" "$work/img/layer/standin"
    tar -C "$work/img/layer" -cf "$work/img/layer.tar" standin
    lsha=$(sha256sum "$work/img/layer.tar" | cut -d' ' -f1)
    mkdir -p "$work/img/a/$lsha" && mv "$work/img/layer.tar" "$work/img/a/$lsha/layer.tar"
    printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/standin"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$lsha" >"$work/img/cfg.json"
    csha=$(sha256sum "$work/img/cfg.json" | cut -d' ' -f1)
    mv "$work/img/cfg.json" "$work/img/a/$csha.json"
    printf '[{"Config":"%s.json","RepoTags":["roundtable-sandbox-worker:latest"],"Layers":["%s/layer.tar"]}]' "$csha" "$lsha" >"$work/img/a/manifest.json"
    tar -C "$work/img/a" -cf "$image" .
  fi
  SANDBOX_DEB_PREBUILT=1 SANDBOX_DEB_BIN=$work/bin SANDBOX_DEB_IMAGE=$image SANDBOX_DEB_OUT=$work/out \
    "$root/packaging/deb/build.sh" || { echo "FAIL: build.sh"; exit 1; }
  deb=$(ls "$work"/out/roundtable-sandbox_*_amd64.deb)
fi
[[ -f $deb ]] || { echo "FAIL: no package at $deb"; exit 1; }

nsroot_lock || { echo "FAIL: could not take the namespaced-run lock"; exit 1; }
nsroot_boot || { echo "FAIL: could not boot the namespace"; exit 1; }
apt_env=(env DEBIAN_FRONTEND=noninteractive)
nsroot_exec sh -c 'cat >/root/roundtable-sandbox.deb' <"$deb"
# Container images of Debian ship a policy-rc.d that forbids starting or
# stopping services from maintainer scripts (exit 101); a real machine has
# none. Remove it in the throwaway root so the scripts run as on a machine.
nsroot_exec rm -f /usr/sbin/policy-rc.d
# Start from a root without the package, even if this machine has it.
if nsroot_exec dpkg-query -W roundtable-sandbox >/dev/null 2>&1; then
  nsroot_exec "${apt_env[@]}" apt-get purge -y roundtable-sandbox >/dev/null 2>&1 || true
fi

echo "== install with Docker unavailable (must succeed, with a note)"
nsroot_exec systemctl mask --runtime --now docker.socket docker.service >/dev/null 2>&1
out=$(nsroot_exec "${apt_env[@]}" apt-get install -y --no-install-recommends /root/roundtable-sandbox.deb 2>&1)
if [[ $? == 0 ]]; then ok "apt-get install without Docker"; else bad "apt-get install without Docker: $out"; fi
if grep -q 'worker image is loaded by sandbox-host at start' <<<"$out"; then ok "postinst notes the image is loaded later"; else bad "no image note in: $out"; fi
out=$(nsroot_exec "${apt_env[@]}" apt-get purge -y roundtable-sandbox 2>&1) && ok "purge without Docker" || bad "purge without Docker: $out"

echo "== install with Docker running"
nsroot_exec systemctl unmask --runtime docker.socket docker.service >/dev/null 2>&1
expect "dockerd starts in the namespace" systemctl start docker.service
out=$(nsroot_exec "${apt_env[@]}" apt-get install -y --no-install-recommends /root/roundtable-sandbox.deb 2>&1)
if [[ $? == 0 ]]; then ok "apt-get install ./roundtable-sandbox.deb"; else bad "apt-get install: $out"; fi
grep -q 'worker image loaded into Docker' <<<"$out" && ok "postinst loaded the worker image" || bad "postinst did not load the image: $out"
expect "image roundtable-sandbox-worker:latest present" docker image inspect roundtable-sandbox-worker:latest

echo "== users, groups, files"
expect "user _sandbox exists" getent passwd _sandbox
expect "user _sandbox-broker exists" getent passwd _sandbox-broker
expect "user _sandbox-credset exists" getent passwd _sandbox-credset
expect "group sandbox-clients exists" getent group sandbox-clients
equal "_sandbox is in group docker" yes sh -c 'id -nG _sandbox | tr " " "\n" | grep -qx docker && echo yes'
equal "_sandbox-broker is not in group docker" no sh -c 'id -nG _sandbox-broker | tr " " "\n" | grep -qx docker && echo yes || echo no'
equal "config owner and mode" "root _sandbox 640" stat -c '%U %G %a' /etc/roundtable-sandbox/sandbox.yaml
equal "config is a conffile" /etc/roundtable-sandbox/sandbox.yaml sh -c "dpkg-query -W -f='\${Conffiles}' roundtable-sandbox | awk '{print \$1}'"
equal "credentials dir owner and mode" "root _sandbox-credset 750" stat -c '%U %G %a' /etc/roundtable-sandbox/credentials
equal "/run/roundtable-sandbox/credsets" "root _sandbox-credset 710" stat -c '%U %G %a' /run/roundtable-sandbox/credsets
equal "/run/roundtable-sandbox" "_sandbox _sandbox 755" stat -c '%U %G %a' /run/roundtable-sandbox
equal "/run/roundtable-sandbox/turns" "_sandbox _sandbox 700" stat -c '%U %G %a' /run/roundtable-sandbox/turns
equal "/run/roundtable-sandbox/policies" "_sandbox _sandbox-broker 2750" stat -c '%U %G %a' /run/roundtable-sandbox/policies
equal "/var/lib/roundtable-sandbox" "_sandbox _sandbox 700" stat -c '%U %G %a' /var/lib/roundtable-sandbox
equal "workspaces" "_sandbox _sandbox 700" stat -c '%U %G %a' /var/lib/roundtable-sandbox/workspaces
equal "toolbox worker binary" "root root 755" stat -c '%U %G %a' /usr/lib/roundtable-sandbox/sandbox-worker
equal "man page installed" /usr/share/man/man8/sandbox-host.8.gz ls /usr/share/man/man8/sandbox-host.8.gz
equal "bash completion installed" /usr/share/bash-completion/completions/sandbox-host ls /usr/share/bash-completion/completions/sandbox-host

echo "== units"
equal "sandbox-host.socket enabled" enabled systemctl is-enabled sandbox-host.socket
equal "sandbox-host.socket active" active systemctl is-active sandbox-host.socket
equal "sandbox-reaper.timer enabled" enabled systemctl is-enabled sandbox-reaper.timer
equal "sandbox-reaper.timer active" active systemctl is-active sandbox-reaper.timer
equal "host.sock owner and mode" "_sandbox sandbox-clients 660 socket" stat -c '%U %G %a %F' /run/roundtable-sandbox/host.sock
equal "sandbox-host.service not started yet" inactive systemctl is-active sandbox-host.service

echo "== the fleet engine: shipped, off by default"
equal "sandbox-nats.service not enabled" disabled systemctl is-enabled sandbox-nats.service
equal "sandbox-nats.service not started" inactive systemctl is-active sandbox-nats.service
expect "user _sandbox-nats exists" getent passwd _sandbox-nats
equal "_sandbox-nats is in no other group" _sandbox-nats id -nG _sandbox-nats
equal "fleet dir owner and mode" "root _sandbox 750" stat -c '%U %G %a' /etc/roundtable-sandbox/fleet
equal "engine binary" "root root 755" stat -c '%U %G %a' /usr/lib/roundtable-sandbox/sandbox-nats
expect "the host's fleet drop-in is shipped" test -f /usr/share/roundtable-sandbox/sandbox-host-fleet.conf
expect "the host API's OpenAPI document is shipped" test -f /usr/share/roundtable-sandbox/openapi.json
expect "the Grafana dashboard is shipped" test -f /usr/share/roundtable-sandbox/grafana/roundtable-sandbox.json

echo "== the fleet engine under its unit (real sandbox-nats and sandbox-host fleet config)"
# The stand-in package carries stand-ins: put the real two in place for this
# section and the stand-ins back after it.
if ((standin)); then
  nsroot_exec cp /usr/bin/sandbox-host /root/sandbox-host.standin
  nsroot_exec sh -c 'cat >/usr/bin/sandbox-host' <"$work/real/sandbox-host"
  nsroot_exec sh -c 'cat >/usr/lib/roundtable-sandbox/sandbox-nats' <"$work/real/sandbox-nats"
fi
fd=/etc/roundtable-sandbox/fleet
expect "a test CA and box certificate" sh -c "cd /root && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=ca -keyout ca.key -out $fd/ca.pem 2>/dev/null &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=box-a -keyout $fd/box.key -out box.csr 2>/dev/null &&
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >ext &&
  openssl x509 -req -in box.csr -CA $fd/ca.pem -CAkey ca.key -CAcreateserial -days 2 -out $fd/box.pem -extfile ext 2>/dev/null &&
  chgrp _sandbox $fd/box.key && chmod 0640 $fd/box.key && chmod 0644 $fd/ca.pem $fd/box.pem"
pub=$(nsroot_exec sandbox-host fleet nkey --output "$fd/box.nkey" 2>/dev/null)
if [[ $pub == U* ]]; then ok "fleet nkey printed a public user key"; else bad "fleet nkey: '$pub'"; fi
equal "seed file owner and mode" "_sandbox _sandbox 600" stat -c '%U %G %a' "$fd/box.nkey"
expect "an encryption key" sh -c "openssl rand -hex 32 | install -m 0600 /dev/stdin $fd/jetstream.key"
expect "fleet.* on in sandbox.yaml" sed -i "/^fleet:\$/,/^  enabled: false\$/ s|^  enabled: false\$|  enabled: true\n  box: box-a\n  url: tls://127.0.0.1:14222\n  replicas: 1\n  server:\n    listen: 127.0.0.1:14222\n    boxes:\n      - {name: box-a, nkey: $pub}|" /etc/roundtable-sandbox/sandbox.yaml
if nsroot_exec systemctl start sandbox-nats.service; then ok "sandbox-nats.service starts (READY=1 once it accepts clients)"; else
  bad "sandbox-nats.service did not start"; nsroot_exec journalctl -u sandbox-nats.service -o cat --no-pager | tail -20
fi
equal "the server runs as _sandbox-nats" _sandbox-nats sh -c 'ps -o user= -p "$(systemctl show -p MainPID --value sandbox-nats.service)"'
equal "its private key copy" "_sandbox-nats _sandbox-nats 600" stat -c '%U %G %a' /run/sandbox-nats/box.key
equal "its encryption key copy" "_sandbox-nats _sandbox-nats 600" stat -c '%U %G %a' /run/sandbox-nats/jetstream.key
equal "its store" "_sandbox-nats _sandbox-nats 700" stat -c '%U %G %a' /var/lib/sandbox-nats
out=$(nsroot_exec sandbox-host --json doctor 2>&1)
for c in fleet fleet-jetstream fleet-permissions fleet-server; do
  got=$(python3 -c 'import json, sys
d = json.loads(sys.stdin.read())
print(" ".join(c["status"] + ": " + c["detail"] for c in d["checks"] if c["name"] == sys.argv[1]) or "absent")' "$c" <<<"$out" 2>&1)
  if [[ $got == ok:* ]]; then ok "doctor: $c ($got)"; else bad "doctor: $c: $got"; fi
done
expect "a key readable by all" chmod 0644 "$fd/jetstream.key"
refuse "sandbox-nats.service refuses to restart with it" systemctl restart sandbox-nats.service
out=$(nsroot_exec journalctl -u sandbox-nats.service -o cat --no-pager 2>&1)
grep -q 'fleet.server.encryptionKeyFile: .*readable by every user' <<<"$out" && ok "the journal names fleet.server.encryptionKeyFile" || bad "journal: $(tail -5 <<<"$out")"
equal "exit 78 stops the restarts" "failed 78" sh -c 'echo "$(systemctl is-active sandbox-nats.service) $(systemctl show -p ExecMainStatus --value sandbox-nats.service)"'
nsroot_exec systemctl reset-failed sandbox-nats.service >/dev/null 2>&1
expect "fleet off again in sandbox.yaml" sed -i '/^fleet:$/,/^      - {name: box-a, nkey: .*}$/c\fleet:\n  enabled: false' /etc/roundtable-sandbox/sandbox.yaml
nsroot_exec sh -c "rm -f $fd/* /root/ca.key /root/box.csr /root/ext /root/ca.srl"
if ((standin)); then
  nsroot_exec cp /root/sandbox-host.standin /usr/bin/sandbox-host
fi

if ((standin)); then
  echo "== socket activation of the host (stand-in)"
  sb=(setpriv --reuid=_sandbox --regid=_sandbox --init-groups)
  out=$(nsroot_exec curl -sS --max-time 10 --unix-socket /run/roundtable-sandbox/host.sock http://host/v1/turns 2>&1)
  uid=$(nsroot_exec id -u _sandbox) dgid=$(nsroot_exec sh -c 'getent group docker | cut -d: -f3')
  grep -q "^uid=$uid gid=$uid groups=.*\b$dgid\b" <<<"$out" && ok "host runs as _sandbox with group docker" || bad "host identity: $out"
  grep -q '^read config: <nil>' <<<"$out" && ok "host reads its config" || bad "host config read: $out"
  equal "sandbox-host.service active after connect" active systemctl is-active sandbox-host.service
  refuse "a user outside sandbox-clients cannot connect" setpriv --reuid=nobody --regid=nogroup --clear-groups \
    curl -sS --max-time 5 --unix-socket /run/roundtable-sandbox/host.sock http://host/

  echo "== broker units through D-Bus and polkit, as _sandbox"
  t=0123456789abcdef0123456789abcdef t2=fedcba9876543210fedcba9876543210
  expect "credential file" sh -c 'printf "sk-test-1\n" | install -m 0640 -o root -g _sandbox-credset /dev/stdin /etc/roundtable-sandbox/credentials/openai'
  expect "_sandbox makes the turn dir" "${sb[@]}" sh -c "umask 077 && mkdir /run/roundtable-sandbox/turns/$t && chmod 711 /run/roundtable-sandbox/turns/$t"
  expect "_sandbox writes a policy" "${sb[@]}" sh -c "umask 027 && echo '{}' >/run/roundtable-sandbox/policies/$t.json"
  equal "policy gets group _sandbox-broker from the setgid dir" "_sandbox _sandbox-broker 640" stat -c '%U %G %a' "/run/roundtable-sandbox/policies/$t.json"
  expect "_sandbox starts sandbox-broker@<turn>.socket" "${sb[@]}" systemctl start "sandbox-broker@$t.socket"
  equal "broker.sock owner and mode" "_sandbox 666 socket" stat -c '%U %a %F' "/run/roundtable-sandbox/turns/$t/broker.sock"
  refuse "_sandbox may not restart it" "${sb[@]}" systemctl restart "sandbox-broker@$t.socket"
  refuse "_sandbox may not start sandbox-host.service" "${sb[@]}" systemctl start sandbox-host.service
  refuse "_sandbox may not stop sandbox-reaper.timer" "${sb[@]}" systemctl stop sandbox-reaper.timer
  refuse "_sandbox may not start a broker unit with a dot" "${sb[@]}" systemctl start "sandbox-broker@a.b.socket"
  refuse "_sandbox-broker may not start broker units" setpriv --reuid=_sandbox-broker --regid=_sandbox-broker --init-groups \
    systemctl start "sandbox-broker@$t2.socket"
  out=$(nsroot_exec "${sb[@]}" curl -sS --max-time 10 --unix-socket "/run/roundtable-sandbox/turns/$t/broker.sock" http://broker/model 2>&1)
  bu=$(nsroot_exec id -u _sandbox-broker)
  bid=$(sed -n 's/^uid=\([0-9]*\) .*/\1/p' <<<"$out")
  bgid=$(nsroot_exec sh -c 'getent group _sandbox-broker | cut -d: -f3')
  groups=$(sed -n 's/^uid=[0-9]* gid=[0-9]* groups=\[\(.*\)\]$/\1/p' <<<"$out" | tr ' ' '\n' | sort -n | tr '\n' ' ')
  want=$(printf '%s\n' "$bgid" "$bid" | sort -n | tr '\n' ' ')
  if grep -q "^uid=$bid gid=$bid " <<<"$out" && [[ $groups == "$want" && -n $bid && $bid != "$bu" && $bid != "$uid" && $bid -ge 61184 && $bid -le 65519 ]]; then
    ok "first connect activated the broker as a dynamic user ($bid) with only group _sandbox-broker"
  else
    bad "broker identity: $out"
  fi
  grep -q '^cred sandbox_openai len=10 err=<nil>' <<<"$out" && ok "credential arrives as \$CREDENTIALS_DIRECTORY/sandbox_openai" || bad "credentials: $out"
  grep -q '^policies: 1 entries err=<nil>' <<<"$out" && ok "broker reads the policy dir" || bad "policy dir: $out"
  grep -q '^read config: .*permission denied' <<<"$out" && ok "broker cannot read the config" || bad "config read: $out"
  grep -q "args=.*\"serve\" \"--turn\" \"$t\"" <<<"$out" && ok "broker argv is serve --turn <turn>" || bad "argv: $out"
  equal "broker service active" active systemctl is-active "sandbox-broker@$t.service"
  expect "_sandbox may reset-failed a broker unit" "${sb[@]}" systemctl reset-failed "sandbox-broker@$t.service" "sandbox-broker@$t.socket"
  expect "_sandbox stops the broker service" "${sb[@]}" systemctl stop "sandbox-broker@$t.service"
  expect "_sandbox stops the broker socket" "${sb[@]}" systemctl stop "sandbox-broker@$t.socket"
  refuse "broker.sock removed on stop" test -e "/run/roundtable-sandbox/turns/$t/broker.sock"
  equal "stopped broker units are collected" "" sh -c "systemctl list-units --all --no-legend 'sandbox-broker@*' | cat"

  echo "== reaper"
  expect "sandbox-reaper.service runs" systemctl start sandbox-reaper.service
  out=$(nsroot_exec journalctl -u sandbox-reaper.service -o cat --no-pager 2>&1)
  grep -q "^uid=$uid gid=$uid groups=.*\b$dgid\b" <<<"$out" && ok "reaper runs as _sandbox with group docker" || bad "reaper identity: $out"

  echo "== upgrade (reinstall): a changed conffile is kept, the host restarts"
  expect "operator edits the config" sh -c 'echo "# local edit" >>/etc/roundtable-sandbox/sandbox.yaml'
  # The credential store as an installation before issue 35 left it (root
  # 0700 directory, root 0600 files), plus a file an operator left too wide
  # and a symbolic link: postinst gives the files to the copier's group,
  # never wider (docs/operating.md, "Credentials").
  c=/etc/roundtable-sandbox/credentials
  expect "credential store as before issue 35" sh -c "dpkg-statoverride --remove $c && chown root:root $c && chmod 0700 $c &&
    chown root:root $c/openai && chmod 0600 $c/openai && printf 'sk-wide\n' >$c/wide && chmod 0666 $c/wide && ln -s /etc/passwd $c/link"
  before=$(nsroot_exec systemctl show -p MainPID --value sandbox-host.service)
  out=$(nsroot_exec "${apt_env[@]}" apt-get install -y --reinstall -o Dpkg::Options::=--force-confold /root/roundtable-sandbox.deb 2>&1) &&
    ok "apt-get install --reinstall" || bad "reinstall: $out"
  expect "local config edit kept" grep -q '^# local edit' /etc/roundtable-sandbox/sandbox.yaml
  equal "config owner and mode after upgrade" "root _sandbox 640" stat -c '%U %G %a' /etc/roundtable-sandbox/sandbox.yaml
  equal "credentials dir after upgrade" "root _sandbox-credset 750" stat -c '%U %G %a' "$c"
  equal "a root 0600 credential after upgrade" "root _sandbox-credset 640" stat -c '%U %G %a' "$c/openai"
  equal "a 0666 credential after upgrade (narrowed)" "root _sandbox-credset 640" stat -c '%U %G %a' "$c/wide"
  equal "the link's target untouched" "root root 644" stat -c '%U %G %a' /etc/passwd
  expect "the copier's user reads a credential" setpriv --reuid=_sandbox-credset --regid=_sandbox-credset --init-groups cat "$c/openai"
  refuse "the copier's user cannot write one" setpriv --reuid=_sandbox-credset --regid=_sandbox-credset --init-groups sh -c "echo x >>$c/openai"
  refuse "the host's user cannot read one" setpriv --reuid=_sandbox --regid=_sandbox --init-groups cat "$c/openai"
  expect "remove the test's extra credentials" rm -f "$c/wide" "$c/link"
  equal "sandbox-host.socket active after upgrade" active systemctl is-active sandbox-host.socket
  after=$(nsroot_exec systemctl show -p MainPID --value sandbox-host.service)
  if [[ $after != 0 && $after != "$before" ]]; then ok "sandbox-host.service restarted ($before -> $after)"; else bad "host not restarted ($before -> $after)"; fi

  echo "== remove while a broker runs"
  expect "_sandbox starts another broker socket" "${sb[@]}" sh -c "mkdir -m 700 /run/roundtable-sandbox/turns/$t2 && systemctl start sandbox-broker@$t2.socket"
else
  echo "== the real binaries under their hardened units"
  out=$(nsroot_exec timeout 60 sandbox-host --json channel list 2>&1)
  if [[ $(nsroot_exec systemctl is-active sandbox-host.service) == active ]]; then
    ok "a client connect activated sandbox-host.service (READY=1 under the hardened unit)"
  else
    bad "sandbox-host.service not active after a connect: $out"
    nsroot_exec journalctl -u sandbox-host.service -o cat --no-pager | tail -20
  fi
  echo "-- sandbox-host doctor:"; nsroot_exec timeout 60 sandbox-host doctor 2>&1 | sed 's/^/   /'
  if nsroot_exec systemctl start sandbox-reaper.service; then
    ok "sandbox-reaper.service runs under its hardened unit"
  else
    bad "sandbox-reaper.service failed"
  fi
  nsroot_exec journalctl -u sandbox-reaper.service -o cat --no-pager | tail -5 | sed 's/^/   /'
fi

echo "== purge"
# A stand-in toolbox under the default tag (the real one takes minutes to build).
expect "stand-in toolbox tagged" docker tag roundtable-sandbox-worker:latest roundtable-sandbox-toolbox:latest
out=$(nsroot_exec "${apt_env[@]}" apt-get purge -y roundtable-sandbox 2>&1) && ok "apt-get purge" || bad "apt-get purge: $out"
equal "no unit left loaded" "" sh -c "systemctl list-units --all --no-legend 'sandbox-*' | cat"
refuse "host.sock removed" test -e /run/roundtable-sandbox/host.sock
refuse "/run/roundtable-sandbox removed" test -e /run/roundtable-sandbox
refuse "/var/lib/roundtable-sandbox removed" test -e /var/lib/roundtable-sandbox
refuse "/etc/roundtable-sandbox removed" test -e /etc/roundtable-sandbox
refuse "statoverride removed" sh -c 'dpkg-statoverride --list | grep -q roundtable-sandbox'
refuse "image removed" docker image inspect roundtable-sandbox-worker:latest
refuse "toolbox image removed" docker image inspect roundtable-sandbox-toolbox:latest
equal "_sandbox dropped from group docker" no sh -c 'id -nG _sandbox | tr " " "\n" | grep -qx docker && echo yes || echo no'
expect "system users kept (Debian practice)" getent passwd _sandbox
refuse "polkit rule removed" test -e /usr/share/polkit-1/rules.d/60-roundtable-sandbox.rules

echo "deb-install-check: $pass passed, $fail failed"
((fail == 0))
