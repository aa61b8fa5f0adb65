# shellcheck shell=bash
# Build the artefacts the end-to-end run needs, install the package inside the
# namespace and purge it again. Sourced after ns.sh.

PKG_NAME=roundtable-sandbox

# build_all builds the .deb (make deb) and the harness's own programs into
# $E2E_WORK/bin. The test images are static binaries in FROM-scratch images.
# "build_all demo": only the stand-ins make demo runs (fakemodel, fakemcp).
build_all() {
  local bin=$E2E_WORK/bin
  mkdir -p "$bin"
  # dist/ is shared with whoever else runs make deb: take a private copy and
  # check it is whole (a concurrent build may be rewriting it).
  local try src
  DEB=""
  if [[ -n ${E2E_DEB:-} ]]; then # a prebuilt package (iterating on scenarios)
    cp "$E2E_DEB" "$E2E_WORK/" && DEB=$E2E_WORK/$(basename "$E2E_DEB")
  fi
  for try in 1 2 3; do
    [[ -n $DEB ]] && break
    e2e_log "building the package (make deb)"
    (cd "$REPO_ROOT" && make --no-print-directory deb) >"$E2E_WORK/make-deb.log" 2>&1 || {
      tail -40 "$E2E_WORK/make-deb.log" >&2
      e2e_die "make deb failed (log above)"
    }
    src=$(ls -t "$REPO_ROOT"/dist/${PKG_NAME}_*_amd64.deb 2>/dev/null | head -1)
    [[ -n $src ]] || e2e_die "make deb produced no dist/${PKG_NAME}_*_amd64.deb"
    cp "$src" "$E2E_WORK/$(basename "$src")"
    # (no "| grep -q": with pipefail its early exit fails dpkg-deb by SIGPIPE)
    if [[ $(dpkg-deb -c "$E2E_WORK/$(basename "$src")" 2>/dev/null) == *" ./usr/bin/sandbox-host"* ]]; then
      DEB=$E2E_WORK/$(basename "$src")
      break
    fi
    e2e_log "$(basename "$src") is incomplete (a concurrent build?); building again"
    rm -f "$E2E_WORK/$(basename "$src")"
    sleep 5
  done
  [[ -n $DEB ]] || e2e_die "could not get a complete package from make deb"
  export DEB
  e2e_log "package: $(basename "$DEB") ($(du -h "$DEB" | cut -f1))"
  if [[ ${1:-} == demo ]]; then
    e2e_log "building the demo's stand-ins (test/e2e/fakemodel, test/e2e/fakemcp)"
  else
    e2e_log "building fakes, test images and the scenario binary"
  fi
  (
    cd "$REPO_ROOT"
    export CGO_ENABLED=0
    go build -trimpath -o "$bin/fakemodel" ./test/e2e/fakemodel &&
      go build -trimpath -o "$bin/fakemcp" ./test/e2e/fakemcp &&
      if [[ ${1:-} == demo ]]; then exit 0; fi &&
      go build -trimpath -ldflags '-s -w' -o "$bin/img-hostile/hostile" ./test/e2e/hostile &&
      go build -trimpath -ldflags '-s -w' -o "$bin/img-stubborn/stubborn" ./test/e2e/stubborn &&
      go test -c -o "$bin/e2e.test" ./test/e2e &&
      go build -o "$bin/testsummary" ./test/testsummary
  ) >"$E2E_WORK/build.log" 2>&1 || {
    tail -40 "$E2E_WORK/build.log" >&2
    e2e_die "building the harness programs failed"
  }
}

# install_images imports the two test worker images into the namespace's dockerd.
install_images() {
  local n
  for n in hostile stubborn; do
    tar -C "$E2E_WORK/bin/img-$n" -cf "$E2E_WORK/bin/img-$n.tar" "$n"
    ns_exec docker import --change "ENTRYPOINT [\"/$n\"]" "$E2E_WORK/bin/img-$n.tar" "roundtable-e2e-$n:latest" >/dev/null ||
      e2e_die "docker import of the $n image failed"
  done
}

# toolbox_base builds (or finds cached) the small test toolbox's base tar on
# the machine side and links (or copies) it into the work directory, the
# one place the namespace sees; empty when this machine cannot build it (the
# run scenarios then skip, saying why). Call it before ns_boot: the cache it
# may create on the machine must be in the leftover check's listing.
toolbox_base() {
  local tar
  TOOLBOX_TAR=""
  if tar=$(cd "$REPO_ROOT" && test/toolbox/build.sh 2>"$E2E_WORK/toolbox-build.log"); then
    { ln -f "$tar" "$E2E_WORK/toolbox-small.tar" 2>/dev/null || cp "$tar" "$E2E_WORK/toolbox-small.tar"; } &&
      TOOLBOX_TAR=$E2E_WORK/toolbox-small.tar
  else
    e2e_log "small toolbox unavailable (code-run scenarios will skip): $(tail -2 "$E2E_WORK/toolbox-build.log" | tr '\n' ' ')"
  fi
}

# peers_path sets E2E_PEERS to test/peers as the namespace sees it (a copy
# in the work directory when the checkout is not visible there), or empty
# when its node_modules are missing (npm ci --prefix test/peers).
peers_path() {
  E2E_PEERS=""
  local src=$REPO_ROOT/test/peers
  [[ -d $src/node_modules ]] || { e2e_log "test/peers/node_modules missing: the MCP client scenario will skip"; return 0; }
  if ns_visible "$src"; then
    E2E_PEERS=$src
  else
    cp -a "$src" "$E2E_WORK/peers" && E2E_PEERS=$E2E_WORK/peers
  fi
  export E2E_PEERS
}

# clients_path sets E2E_CLIENTS to clients/ (the TypeScript client and the
# Pi extension) as the namespace sees it (a copy when the checkout is not
# visible there), or empty when they are not built (make clients).
clients_path() {
  E2E_CLIENTS=""
  local src=$REPO_ROOT/clients
  [[ -f $src/typescript/dist/test/integration.test.js && -f $src/pi-extension/dist/src/index.js && -d $src/pi-extension/node_modules ]] ||
    { e2e_log "clients/ not built (make clients): the TypeScript client and Pi scenarios will skip"; return 0; }
  if ns_visible "$src"; then
    E2E_CLIENTS=$src
  else
    cp -a "$src" "$E2E_WORK/clients" && E2E_CLIENTS=$E2E_WORK/clients
  fi
  export E2E_CLIENTS
}

# install_toolbox imports it inside the namespace with the installed
# package's own command and worker binary (what an operator runs).
install_toolbox() {
  [[ -n ${TOOLBOX_TAR:-} ]] || return 0
  e2e_log "importing the small toolbox (sandbox-host toolbox build --small --base-tar)"
  ns_exec /usr/bin/sandbox-host toolbox build --small --base-tar "$TOOLBOX_TAR" >"$E2E_WORK/toolbox-import.log" 2>&1 || {
    tail -20 "$E2E_WORK/toolbox-import.log" >&2
    e2e_die "sandbox-host toolbox build --base-tar failed in the namespace"
  }
}

# install_package installs the .deb inside the namespace (its maintainer
# scripts talk to the namespace's systemd).
install_package() {
  # The namespace has its own /tmp, /run and /var/tmp: a package built in a
  # clone under /tmp is not there. Install a copy in the work directory.
  if ! ns_visible "$DEB"; then
    cp "$DEB" "$E2E_WORK/" || e2e_die "cannot copy $DEB into $E2E_WORK"
    DEB=$E2E_WORK/$(basename "$DEB")
  fi
  e2e_log "installing $(basename "$DEB") inside the namespace"
  if ! ns_exec env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$DEB" >"$E2E_WORK/install.log" 2>&1; then
    tail -40 "$E2E_WORK/install.log" >&2
    e2e_die "installing the package failed"
  fi
  [[ $(ns_exec dpkg -s "$PKG_NAME" 2>/dev/null) == *"Status: install ok installed"* ]] || e2e_die "package not installed after apt-get install"
}

# install_purge removes the package inside the namespace (a check that the
# purge works under a real systemd; the namespace's overlay root vanishes
# with it anyway). Called by ns_teardown while the namespace still runs.
install_purge() {
  # Decided by dpkg's state inside, not by who installed it: bench/lib/full.sh
  # installs the package itself and relies on this purge.
  ns_exec dpkg -s "$PKG_NAME" >/dev/null 2>&1 || return 0
  local rc=0
  ns_exec systemctl stop sandbox-host.service sandbox-host.socket sandbox-reaper.timer 'sandbox-broker@*' >/dev/null 2>&1 || true
  ns_exec env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "$PKG_NAME" >"$E2E_WORK/purge.log" 2>&1 || {
    e2e_log "apt-get purge failed:"
    tail -20 "$E2E_WORK/purge.log" >&2
    ns_exec dpkg --purge --force-all "$PKG_NAME" >>"$E2E_WORK/purge.log" 2>&1 || rc=1
  }
  if ns_exec dpkg -s "$PKG_NAME" >/dev/null 2>&1; then
    e2e_log "LEFT: package $PKG_NAME still installed in the namespace after the purge"
    rc=1
  fi
  return $rc
}
