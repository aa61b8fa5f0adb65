// Pi loads this (package.json's pi.extensions): sandbox_run, the session
// tools and /sandbox-status on the roundtable-sandbox host at --sandbox-socket
// (ROUNDTABLE_SANDBOX_SOCKET; default /run/roundtable-sandbox/host.sock),
// for the project --sandbox-project (ROUNDTABLE_SANDBOX_PROJECT).
import { SandboxClient } from "@roundtable-sandbox/client";

import { register } from "./extension.js";
import type { PiAPI } from "./pi.js";

export default function (pi: PiAPI): void {
  register(pi, (cfg) => new SandboxClient({ socketPath: cfg.socketPath }));
}
