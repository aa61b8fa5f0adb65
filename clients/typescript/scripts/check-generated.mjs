// Fails when src/schema.ts is not what openapi-typescript makes of the
// host's OpenAPI document (pkg/api/openapi.json): run `npm run generate`.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dir = mkdtempSync(join(tmpdir(), "sandbox-schema-"));
try {
  const out = join(dir, "schema.ts");
  execFileSync(join(root, "node_modules/.bin/openapi-typescript"), [join(root, "../../pkg/api/openapi.json"), "-o", out], { stdio: "ignore" });
  if (readFileSync(out, "utf8") !== readFileSync(join(root, "src/schema.ts"), "utf8")) {
    console.error("src/schema.ts is out of date with pkg/api/openapi.json: run `npm run generate` in clients/typescript");
    process.exit(1);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
